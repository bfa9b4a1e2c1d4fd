"""The search: the supernet, its losses, the search run, and turning theta into networks.

Step 2 and 3 of the chain (``fbnas train``, ``fbnas sample``): the Gumbel-softmax supernet
(a loop over candidates, and the fused and shared-weight forms that run them faster), the
latency-aware losses, the search run built on ``fbnas.runs``' trainer, its pictures and
warnings, and sampling an architecture, under a latency budget if one is named; and picking
one under a budget without training (``fbnas pick``: the latency term's prior and NASWOT).
"""
