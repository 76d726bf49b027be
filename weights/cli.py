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
    ls = sub.add_parser("list", help="the manifest: name, arch, metric, cached size, "
                                     "checksum (--json: URLs and cache paths)")
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
    """Rows of strings as an aligned text table; a cell of several lines (a download's
    error, one line per source) shows its first line in the table and the rest indented
    under its row, so one long cell does not widen the table."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i].split("\n")[0]) for r in cells])
              for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    for r in cells:
        out.append("  ".join(c.split("\n")[0].ljust(w) for c, w in zip(r, widths)).rstrip())
        out += ["    " + more.strip() for c in r for more in c.split("\n")[1:]]
    return "\n".join(out)


def _emit(args, rows, headers):
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table([[r[h] if r[h] is not None else "-" for h in headers] for r in rows],
                    headers))


def _cached_mb(entry):
    path = api.entry_path(entry)
    return round(os.path.getsize(path) / 1e6, 1) if os.path.exists(path) else None


def cmd_list(args):
    """The table: name, arch, top-1, the cached file's size in MB ("-": not downloaded),
    checksum kind, converter; --json adds each entry's URLs (primary first, then mirrors:
    what to fetch by hand for an offline machine) and the path it is cached at."""
    rows = []
    for e in list_entries(args.arch):
        row = {"name": e.name, "arch": e.arch, "top1": e.metrics.get("top1"),
               "cached_mb": _cached_mb(e), "cached": api.is_cached(e), "checksum": e.sha256_kind,
               "convert": e.converter or "download-only"}
        if args.json:
            row.update({"urls": list(e.urls), "sha256": e.sha256, "path": api.entry_path(e)})
        rows.append(row)
    _emit(args, rows, ["name", "arch", "top1", "cached_mb", "checksum", "convert"])
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
