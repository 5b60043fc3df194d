"""Line charts as PNG with the Python standard library only (zlib + struct),
for benchmarks on hosts without matplotlib (scripts/plot needs it). A figure
is a grid of panels; each panel has log2 or log10 axes, series drawn as
lines with dots (solid) or dashes with hollow dots (a prediction), and a
legend. Text uses a built-in 3x5 pixel font (upper case, digits, . - / % ( )
= : + and space), scaled 2x.
"""
import math
import struct
import zlib

_FONT = {  # 3 columns x 5 rows, '#' on
    "0": "#### ## ## ####", "1": " # ##  #  # ###", "2": "###  #####  ###",
    "3": "###  # ##  ####", "4": "# ## ####  #  #", "5": "####  ###  ####",
    "6": "####  #### ####", "7": "###  # #  #  # ", "8": "#### ##### ####",
    "9": "#### ####  ####", "A": " # # ##### ## #", "B": "## # ### # ### ",
    "C": " ###  #  #   ##", "D": "## # ## ## ### ", "E": "####  ## #  ###",
    "F": "####  ## #  #  ", "G": " ###  # ## # ##", "H": "# ## ##### ## #",
    "I": "### #  #  # ###", "J": "  #  #  ## # # ", "K": "# ## ### # ## #",
    "L": "#  #  #  #  ###", "M": "# ######## ## #", "N": "## # ## ## ## #",
    "O": " # # ## ## # # ", "P": "## # ### #  #  ", "Q": " # # ## ###  ##",
    "R": "## # ### # ## #", "S": " ###   #   ### ", "T": "### #  #  #  # ",
    "U": "# ## ## ## ####", "V": "# ## ## ## # # ", "W": "# ## ######## #",
    "X": "# ## # # # ## #", "Y": "# ## # #  #  # ", "Z": "###  # # #  ###",
    ".": "             # ", "-": "      ###      ", "/": "  #  # # #  #  ",
    "%": "# #  # # #  # #", "(": " # #  #  #   # ", ")": " #   #  #  # # ",
    "=": "   ###   ###   ", ":": "    #     #    ", "+": "    # ### #    ",
    " ": "               ", "_": "            ###", ",": "          # #  ",
}


def _glyph(ch):
    g = _FONT.get(ch.upper(), _FONT[" "])
    return (g + " " * 15)[:15]


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, c):
        x, y = int(round(x)), int(round(y))
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(int(y0), int(y1) + 1):
            for x in range(int(x0), int(x1) + 1):
                self.dot(x, y, c)

    def line(self, x0, y0, x1, y1, c, dash=0, width=2):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for i in range(n + 1):
            if dash and (i // dash) % 2:
                continue
            t = i / n
            x, y = x0 + (x1 - x0) * t, y0 + (y1 - y0) * t
            for d in range(width):
                self.dot(x, y + d, c)

    def marker(self, x, y, c, hollow=False):
        for dy in range(-3, 4):
            for dx in range(-3, 4):
                r = dx * dx + dy * dy
                if r <= 10 and (not hollow or r >= 5):
                    self.dot(x + dx, y + dy, c)

    def text(self, x, y, s, c=(0, 0, 0), scale=2, anchor="left"):
        wd = len(s) * 4 * scale
        if anchor == "right":
            x -= wd
        elif anchor == "center":
            x -= wd // 2
        for k, ch in enumerate(s):
            g = _glyph(ch)
            for row in range(5):
                for col in range(3):
                    if g[row * 3 + col] == "#":
                        self.rect(x + (k * 4 + col) * scale, y + row * scale,
                                  x + (k * 4 + col) * scale + scale - 1, y + row * scale + scale - 1, c)

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(tag, data):
            return (struct.pack(">I", len(data)) + tag + data +
                    struct.pack(">I", zlib.crc32(tag + data) & 0xffffffff))
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189), (140, 86, 75)]


def _fmt(v):
    if v >= 1000 or v < 0.01:
        e = int(math.floor(math.log10(v)))
        m = v / 10 ** e
        return f"{m:.0f}E{e}" if abs(m - round(m)) < 1e-6 else f"{m:.1f}E{e}"
    return f"{v:g}"


def panel(cv, x0, y0, w, h, title, series, xlabel):
    """series: list of (label, color index, [(x, y)], predicted?). Log axes."""
    pts = [(x, y) for _, _, p, _ in series for x, y in p if x > 0 and y and y > 0]
    cv.text(x0 + w // 2, y0, title, anchor="center")
    left, top, right, bottom = x0 + 70, y0 + 20, x0 + w - 10, y0 + h - 40
    cv.line(left, bottom, right, bottom, (0, 0, 0), width=1)
    cv.line(left, top, left, bottom, (0, 0, 0), width=1)
    cv.text((left + right) // 2, bottom + 24, xlabel, anchor="center")
    if not pts:
        cv.text((left + right) // 2, (top + bottom) // 2, "NO DATA", anchor="center")
        return
    xs = [math.log2(x) for x, _ in pts]
    ys = [math.log10(y) for _, y in pts]
    xa, xb = math.floor(min(xs)), math.ceil(max(xs))
    ya, yb = math.floor(min(ys)), math.ceil(max(ys))
    if xb == xa:
        xb += 1
    if yb == ya:
        yb += 1

    def X(x):
        return left + (math.log2(x) - xa) / (xb - xa) * (right - left)

    def Y(y):
        return bottom - (math.log10(y) - ya) / (yb - ya) * (bottom - top)
    for e in range(xa, xb + 1):
        cv.line(X(2 ** e), bottom, X(2 ** e), bottom + 4, (0, 0, 0), width=1)
        cv.text(X(2 ** e), bottom + 8, str(2 ** e), anchor="center")
    for e in range(ya, yb + 1):
        cv.line(left - 4, Y(10 ** e), right, Y(10 ** e), (220, 220, 220), width=1)
        cv.text(left - 8, Y(10 ** e) - 5, _fmt(10 ** e), anchor="right")
    for label, ci, p, pred in series:
        c = COLORS[ci % len(COLORS)]
        q = sorted((x, y) for x, y in p if x > 0 and y and y > 0)
        for (a, b), (cx, d) in zip(q, q[1:]):
            cv.line(X(a), Y(b), X(cx), Y(d), c, dash=6 if pred else 0)
        for x, y in q:
            cv.marker(X(x), Y(y), c, hollow=pred)


def figure(path, panels, legend, cols=3, pw=420, ph=300, title=""):
    """panels: list of (title, series, xlabel); legend: list of (label, color, predicted?)."""
    rows = (len(panels) + cols - 1) // cols
    lh = 18 * ((len(legend) + 2) // 3) + 10
    cv = Canvas(cols * pw, rows * ph + lh + 30)
    cv.text(cols * pw // 2, 6, title, anchor="center")
    for i, (t, s, xl) in enumerate(panels):
        panel(cv, (i % cols) * pw, 30 + (i // cols) * ph, pw, ph, t, s, xl)
    y = 30 + rows * ph
    for i, (label, ci, pred) in enumerate(legend):
        x = 20 + (i % 3) * (cols * pw // 3)
        yy = y + 18 * (i // 3)
        c = COLORS[ci % len(COLORS)]
        cv.line(x, yy + 4, x + 30, yy + 4, c, dash=6 if pred else 0)
        cv.marker(x + 15, yy + 5, c, hollow=pred)
        cv.text(x + 40, yy, label)
    with open(path, "wb") as f:
        f.write(cv.png())
