"""`tianyuan weights list | download NAME | verify [NAME...] | import FILE ...`

Each command prints a table, or JSON with `--json`; the exit status is 0 on success,
1 when a download or check failed.
"""
import argparse
import json
import os
import pickle
import sys

from . import api
from .download import DownloadError
from .manifest import get_entry, list_entries


def _parser():
    parser = argparse.ArgumentParser(prog="tianyuan weights",
                                     description="pretrained weights: list, fetch, check, convert")
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the manifest: name, arch, metric, size, cached?")
    ls.add_argument("--arch", help="only entries for this architecture")
    dl = sub.add_parser("download", help="fetch and verify into $TIANYUAN_HOME")
    dl.add_argument("names", nargs="+", metavar="NAME")
    dl.add_argument("--no-progress", action="store_true")
    vf = sub.add_parser("verify", help="re-hash cached files (all cached, or NAME...)")
    vf.add_argument("names", nargs="*", metavar="NAME")
    im = sub.add_parser("import", help="convert a .pth/.pkl to our names as safetensors")
    im.add_argument("file")
    im.add_argument("--arch", required=True)
    im.add_argument("--format", choices=["torchvision", "megengine", "safetensors"])
    im.add_argument("--out", required=True)
    im.add_argument("--num-classes", type=int)
    for p in (ls, dl, vf, im):
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def table(rows, headers):
    """Rows of strings as an aligned text table."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


def _emit(args, rows, headers):
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table([[r[h] if r[h] is not None else "-" for h in headers] for r in rows],
                    headers))


def _size(entry):
    path = api.entry_path(entry)
    return f"{os.path.getsize(path) / 1e6:.1f}MB" if os.path.exists(path) else None


def cmd_list(args):
    rows = [{"name": e.name, "arch": e.arch, "top1": e.metrics.get("top1"),
             "size": _size(e), "cached": api.is_cached(e),
             "checksum": e.sha256_kind, "convert": e.converter or "download-only"}
            for e in list_entries(args.arch)]
    _emit(args, rows, ["name", "arch", "top1", "size", "cached", "checksum", "convert"])
    return 0


def cmd_download(args):
    rows, status = [], 0
    for name in args.names:
        entry = get_entry(name)
        try:
            path = api.download(entry, progress=not args.no_progress and not args.json)
            rows.append({"name": name, "status": "ok", "path": path, "error": None})
        except DownloadError as error:
            rows.append({"name": name, "status": "failed", "path": None, "error": str(error)})
            status = 1
    _emit(args, rows, ["name", "status", "path", "error"])
    return status


def cmd_verify(args):
    entries = [get_entry(n) for n in args.names] if args.names else api.cached_entries()
    rows, status = [], 0
    for entry in entries:
        result, digest = api.verify(entry)
        rows.append({"name": entry.name, "status": result, "sha256": digest,
                     "expected": entry.sha256, "path": api.entry_path(entry)})
        status |= result in ("mismatch",) or (bool(args.names) and result == "missing")
    _emit(args, rows, ["name", "status", "sha256", "expected", "path"])
    return int(status)


def cmd_import(args):
    state = api.import_file(args.file, args.out, args.arch, args.format, args.num_classes,
                            args.spec_for)
    count = sum(int(v.size) for v in state.values())
    rows = [{"file": args.file, "arch": args.arch, "out": args.out, "tensors": len(state),
             "values": count}]
    _emit(args, rows, ["file", "arch", "out", "tensors", "values"])
    return 0


COMMANDS = {"list": cmd_list, "download": cmd_download, "verify": cmd_verify,
            "import": cmd_import}


def main(argv=None, spec_for=None):
    """`spec_for(arch, num_classes)`: the spec `import` checks a file against (the zoo's
    built model's: `tianyuan weights` passes `tianyuan.zoo.model_spec`), or None."""
    args = _parser().parse_args(argv)
    args.spec_for = spec_for
    try:
        return COMMANDS[args.command](args)
    except (KeyError, ValueError, FileNotFoundError, NotImplementedError,
            pickle.UnpicklingError, DownloadError) as error:   # a refused pickle; offline
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"tianyuan weights {args.command}: {message}", file=sys.stderr)
        return 2
