"""Writing matplotlib figures reproducibly (every plot of the suite goes through here)."""

from __future__ import annotations

from pathlib import Path

from flashnerd.utils.atomic import atomic_path


def save_figure(fig, path: str | Path, dpi: int = 120) -> None:
    """Write a matplotlib figure as PNG through a temporary file, without a version stamp (rebuilds match), and
    close it."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
