"""fbnas: FBNet-style hardware-aware differentiable neural architecture search."""

__version__ = "0.1.0"

import logging as _logging

# torch's extension helper warns about a missing CUDA runtime on CPU-only machines; it is
# noise for every fbnas command.
_logging.getLogger("torch.utils.cpp_extension").setLevel(_logging.ERROR)

from fbnas.errors import FbnasError  # noqa: E402

__all__ = ["FbnasError", "__version__"]
