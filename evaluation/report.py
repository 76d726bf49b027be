"""Results as a printed table and a JSON file (DESIGN.md "Command line").

>>> print(format_table([{"model": "resnet18", "top1": 69.76}], title="eval"))
"""
import json
import os


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-3 or abs(value) >= 1e5 else f"{value:.3f}"
    return str(value)


def format_table(rows, columns=None, title=None):
    """rows: list of dicts; columns: the keys to show (default: those of the first row)."""
    if not rows:
        return title or ""
    columns = list(columns or rows[0].keys())
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(str(c)), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    line = "  ".join(str(c).ljust(w) for c, w in zip(columns, widths))
    out = ([title] if title else []) + [line, "-" * len(line)]
    out += ["  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths))
            for r in cells]
    return "\n".join(out)


def _numeric(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def write_json(path, obj):
    """Write `obj` as indented JSON, creating the folder; returns the path."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(obj, handle, indent=2, default=_jsonable)
        handle.write("\n")
    os.replace(tmp, path)
    return path


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"write_json: cannot write a {type(value).__name__}")
