"""Text reports of architectures: aligned plain-text tables for the terminal.

What ``fbnas sample`` prints (one architecture per stage, or draws ranked by predicted
latency) and what ``fbnas summary`` prints (per-layer output shape, params, multiply-adds and
table latency). Only formatting lives here; figures come from the entry, the lookup table
(:mod:`fbnas.latency.matching`) and one forward pass (:mod:`fbnas.latency.measure`).

Compute is printed as multiply-adds, "MACs", the unit papers compare networks by (the FBNet
paper's "FLOPs" are multiply-adds); a FLOPs figure, where one is printed, says "FLOPs (2 per
MAC)".
"""

from __future__ import annotations

from fbnas.arch.definition import layer_rows
from fbnas.check_rules import RERANK_RULES, rule_label
from fbnas.latency.matching import match_lut, row_latencies
from fbnas.latency.measure import layer_stats


def table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    """Plain aligned columns; ``right`` holds the indexes of right-aligned columns."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def fmt(r):
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        return "  ".join(cells).rstrip()

    return "\n".join([fmt(headers), *(fmt(r) for r in rows)])


def human(n: float) -> str:
    """12345 -> '12.3k', 1.2e6 -> '1.20M'."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def predicted_macs(pred: dict) -> float | None:
    """The multiply-adds an entry's ``predicted`` record holds: ``macs``, or half the
    ``flops`` of files written before counts were MACs (torch's FLOPs, 2 per multiply-add)."""
    for key, scale in (("macs", 1), ("flops", 0.5)):
        v = pred.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v * scale
    return None


def _macs_text(pred: dict) -> str:
    macs = predicted_macs(pred)
    return "-" if macs is None else human(macs)


def format_entry(entry: dict, lut=None) -> str:
    """An architecture as a per-stage table: op, channels, stride, input size, p(op), the
    layer's largest probability (p max: how decided theta is there; an op below it was not
    the layer's argmax, e.g. under a latency budget), latency."""
    rows = layer_rows(entry)
    lats = row_latencies(entry, lut) if lut is not None else None
    theta = entry.get("theta_softmax") if isinstance(entry.get("theta_softmax"), list) else None
    out = []
    for i, r in enumerate(rows):
        p = top = ""
        if theta and 0 < i < len(rows) - 1 and i - 1 < len(theta) \
                and isinstance(theta[i - 1], dict) and theta[i - 1]:
            p = f"{theta[i - 1].get(r.op, 0.0):.2f}"
            top = f"{max(theta[i - 1].values()):.2f}"
        out.append([r.stage, r.label, r.op,
                    f"{r.c_in}->{r.c_out}", str(r.stride), f"{r.h}x{r.h}", p, top,
                    f"{lats[i]:.1f}" if lats else "-"])
    sp = entry.get("space") if isinstance(entry.get("space"), dict) else {}
    head = (f"architecture {entry.get('name')} (space {sp.get('name', '?')}, "
            f"{len(entry['blocks'])} blocks)")
    body = table(["stage", "layer", "op", "channels", "stride", "input", "p(op)", "p max",
                  "table us"], out, right={4, 6, 7, 8})
    lines = [head, body]
    pred = entry.get("predicted")
    if isinstance(pred, dict) and "latency_us" in pred:
        how = (f"calibrated; table sum {pred['table_sum_us']:.1f} us" if pred.get("calibrated")
               else "uncalibrated table sum")
        lines.append(f"predicted latency {pred['latency_us']:.1f} us ({how}, batch "
                     f"{pred.get('batch')}), {_macs_text(pred)} MACs, "
                     f"{human(pred['params'])} params")
    how = entry.get("sampling") if isinstance(entry.get("sampling"), dict) else {}
    budget, prob = how.get("target_ms"), entry.get("probability")
    method = how.get("method")
    if method in ("argmax_under_budget", "one_shot_rerank") and isinstance(budget,
                                                                        (int, float)):
        chance = f" (probability {prob:.3g})" if isinstance(prob, (int, float)) else ""
        floor = how.get("floor")
        spend = (f" and at least {floor * budget:g} ms" if isinstance(floor, (int, float))
                 and floor > 0 else "")
        what = "the most probable architecture"
        if method == "one_shot_rerank":
            rank, of = how.get("rank"), how.get("of")
            by = how.get("by")
            best = f"the best by {rule_label(by)}" if by in RERANK_RULES else "the best one-shot"
            what = (f"{best} (the search's last-epoch check) of the {of} architectures "
                    f"it checked, #{rank + 1} of them," if
                    isinstance(rank, int) and isinstance(of, int) else "the search's one-shot "
                    "pick among the most probable architectures")
        lines.append(f"{what} predicted within {budget:g} ms{spend}{chance}")
    return "\n".join(lines)


def stage_ops(entry: dict) -> str:
    """The ops of an entry grouped by stage: 'k3_e1 | k5_e1 skip | k3_e3'."""
    groups: list[list[str]] = []
    for r in layer_rows(entry)[1:-1]:
        if r.stage != "" or not groups:
            groups.append([])
        groups[-1].append(r.op)
    return " | ".join(" ".join(g) for g in groups)


def format_ranked(entries: list[dict], num: int, seed: int) -> str:
    """Sampled architectures ranked by predicted latency."""
    rows = []
    for rank, e in enumerate(entries, 1):
        pr = e["predicted"]
        rows.append([str(rank), e["name"], f"{pr['latency_us']:.1f}", _macs_text(pr),
                     human(pr["params"]), f"{e['probability']:.2e}",
                     str(e["sampling"].get("times_drawn", 1)), stage_ops(e)])
    head = (f"{num} draw(s) from softmax(theta) with seed {seed}: {len(entries)} distinct, "
            "fastest predicted first")
    return head + "\n" + table(["rank", "name", "latency us", "MACs", "params", "p(theta)",
                                "drawn", "ops by stage"], rows, right={0, 2, 3, 4, 5, 6})


def format_summary(defn: dict, lut=None) -> str:
    """The per-layer summary table, with table latencies when ``lut`` is given."""
    batch = lut.batch if lut is not None else 1
    stats = layer_stats(defn, batch)
    lats = row_latencies(defn, lut) if lut is not None else None
    total_lat = sum(lats) if lats else 0.0
    rows = []
    for i, s in enumerate(stats):
        lat = f"{lats[i]:.1f}" if lats else "-"
        share = f"{100 * lats[i] / total_lat:.0f}%" if lats else "-"
        rows.append([s.row.label, s.row.op, "x".join(map(str, s.out_shape)), f"{s.params:,}",
                     human(s.macs), lat, share])
    tp = sum(s.params for s in stats)
    tm = sum(s.macs for s in stats)
    rows.append(["total", "", "", f"{tp:,}", human(tm), f"{total_lat:.1f}" if lats else "-",
                 "100%" if lats else "-"])
    sp = defn.get("space") if isinstance(defn.get("space"), dict) else {}
    inp = defn["input"]
    shape = f"{batch}x{inp['channels']}x{inp['resolution']}x{inp['resolution']}"
    lines = [f"architecture {defn.get('name')} (space {sp.get('name', '?')}), input {shape}",
             table(["layer", "op", "output", "params", "MACs", "table us", "share"], rows,
                   right={3, 4, 5, 6}),
             f"network: {human(tm)} MACs (multiply-adds), {human(tp)} params; "
             f"{human(2 * tm)} FLOPs (2 per MAC)"]
    pub = published_text(defn)
    if pub:
        lines.append(pub)
    if lut is not None:
        ops = match_lut(defn, lut, defn.get("name", "the architecture"))
        cal = lut.calibration
        pred = lut.predict(ops)
        how = "calibrated" if cal else "uncalibrated: table sum"
        lines.append(f"predicted latency {pred:.1f} us ({how}) by {lut.path}, batch {lut.batch}, "
                     f"{lut.threads} thread(s)")
    else:
        lines.append("no lookup table: pass --lut PATH for per-layer latencies")
    return "\n".join(lines)


def published_text(defn: dict) -> str | None:
    """The figures a definition's ``published`` record gives (a published network: its
    paper's multiply-adds and params, and how this definition differs), or None."""
    pub = defn.get("published")
    if not isinstance(pub, dict):
        return None

    def number(key):
        v = pub.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None

    macs, params = number("macs"), number("params")
    source, note = pub.get("source"), pub.get("note")
    parts = ["published" + (f": {source}" if isinstance(source, str) and source else "")]
    if macs:
        parts.append(f"{macs / 1e6:.0f}M MACs")
    if params:
        parts.append(f"{params / 1e6:.1f}M params")
    text = ", ".join(parts)
    return f"{text}; {note}" if isinstance(note, str) and note else text
