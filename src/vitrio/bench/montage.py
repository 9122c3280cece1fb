"""The drawing of `vitrio montage`'s labels: the text under each tile of a canvas, and the PNG's
Description listing them, by Pillow in the DejaVu Sans that comes with matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import vitrio as vio

if TYPE_CHECKING:
    from PIL import Image, ImageFont

__all__ = ["FONT_PIXELS", "fit_text", "label_font", "labelled"]

FONT_PIXELS = 10


def label_font() -> ImageFont.FreeTypeFont:
    """The font of the labels: the DejaVu Sans that comes with matplotlib, drawn by Pillow (matplotlib's
    own dependency: the cli extra installs both)."""
    import matplotlib
    from PIL import ImageFont

    return ImageFont.truetype(
        str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"), FONT_PIXELS
    )


def fit_text(text: str, width: int, font: ImageFont.FreeTypeFont) -> str:
    """Each line of `text`, its start cut off (marked by an ellipsis) where wider than `width` pixels."""
    lines = []
    for line in text.split("\n"):
        cut = line
        while len(cut) > 1 and font.getlength(cut) > width:
            line = line[1:]
            cut = "…" + line
        lines.append(cut)
    return "\n".join(lines)


def labelled(
    canvas: np.ndarray, labels: list[tuple[float, float, str]], width: int, font: ImageFont.FreeTypeFont
) -> tuple[Image.Image, Any]:
    """The greyscale image of `canvas`, pixel for pixel, with each label `(x, y, text)` drawn centred on
    `(x, y)` in `font`, and the PNG text (`PngInfo`) listing the labels whole, one a line, as its
    Description. A line of a label wider than `width` pixels is cut short on the picture."""
    from PIL import Image, ImageDraw
    from PIL.PngImagePlugin import PngInfo

    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    for x, y, text in labels:
        lines = fit_text(text, width, font)
        draw.multiline_text((x, y), lines, fill=255, font=font, anchor="mm", align="center", spacing=2)
    info = PngInfo()
    info.add_text("Software", f"vitrio {vio.__version__}")
    info.add_text("Description", "\n".join(t.replace("\n", " ") for _, _, t in labels))
    return image, info
