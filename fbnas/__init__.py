"""fbnas: FBNet-style hardware-aware differentiable neural architecture search."""

__version__ = "0.1.0"

import logging as _logging

# torch's extension helper warns about a missing CUDA runtime on CPU-only machines; it is
# noise for every fbnas command.
_logging.getLogger("torch.utils.cpp_extension").setLevel(_logging.ERROR)

from fbnas.errors import FbnasError  # noqa: E402

__all__ = ["FbnasError", "__version__", "build_model"]


def __getattr__(name: str):
    # build_model pulls in torch; importing it lazily keeps `import fbnas` and `fbnas --help` fast.
    if name == "build_model":
        from fbnas.arch.definition import build_model

        return build_model
    raise AttributeError(f"module 'fbnas' has no attribute {name!r}")
