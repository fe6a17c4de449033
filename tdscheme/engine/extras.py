"""The engine's optional packages, checked without importing them, each named with its extra.

A logger backend, videos and plots need packages that ``pip install tdscheme`` leaves
out (``pyproject.toml``'s extras): each check returns the ``ImportError`` that names
the extra to install, or ``None``. They import nothing (``importlib.util.find_spec``),
so the ``tdscheme`` command runs them before it makes a run directory or starts Ray
(:mod:`tdscheme.cli.preflight`), and a :class:`~tdscheme.engine.Trainer` before it
builds its scheme.

Example:
    >>> missing_logger_package("csv") is None
    True
    >>> missing_logger_package("neptune") is None  # not a backend: TrainerConfig says so
    True
"""

from __future__ import annotations

from tdscheme.validation import missing_extra

__all__ = ["missing_logger_package", "missing_plot_package", "missing_video_packages"]

#: Each logger backend's Python packages, the extra that installs them, and their own pip
#: names. MLflow's includes omegaconf: torchrl's ``MLFlowLogger.log_hparams`` imports it.
LOGGER_PACKAGES = {
    "tensorboard": (("tensorboard",), "tensorboard", "tensorboard"),
    "wandb": (("wandb",), "loggers", "wandb"),
    "mlflow": (("mlflow", "omegaconf"), "loggers", "mlflow-skinny omegaconf"),
}

#: What videos need: imageio and its bundled ffmpeg (the ``video`` extra; the env's own
#: renderer is :func:`tdscheme.envs.ids.missing_env_packages`'s, with ``render=True``).
VIDEO_PACKAGES = ("imageio", "imageio_ffmpeg")


def missing_logger_package(backend: str) -> ImportError | None:
    """The error for a logger backend whose package is not installed, or ``None``.

    Args:
        backend: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``.

    Returns:
        An ``ImportError`` naming every missing package, the extra and their own pip names.

    Example:
        >>> missing_logger_package("tensorboard") is None  # installed with the tensorboard extra
        True
    """
    if backend not in LOGGER_PACKAGES:
        return None
    packages, extra, pip_name = LOGGER_PACKAGES[backend]
    return missing_extra(
        f"backend={backend!r}", packages, extra,
        instead=f"`pip install {pip_name}`, or use backend='csv'",
    )  # fmt: skip


def missing_video_packages() -> ImportError | None:
    """The error for videos (``video=True``, ``tdscheme eval --video``) without the ``video`` extra."""
    return missing_extra("video=True", VIDEO_PACKAGES, "video")


def missing_plot_package(what: str = "plotting") -> ImportError | None:
    """The error for a plot (``tdscheme plot``, ``tdscheme eval`` of a run) without matplotlib."""
    return missing_extra(what, ["matplotlib"], "plot")
