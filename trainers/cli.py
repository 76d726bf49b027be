"""The `tianyuan` command: a table of subcommands, each `main(argv) -> exit status`.

    tianyuan weights list | download NAME | verify | import FILE --arch A --out F

Subcommands (weights, train, eval, quantize, bench, run, generate, fid, detect, pose) are one
row of SUBCOMMANDS; the module named there is imported only when its command runs.

A mistake in the command line or the files it names (a missing file, a bad value, an
unknown config) ends in one line, "tianyuan CMD: what is wrong", and exit status 2;
TIANYUAN_TRACEBACK=1 shows the traceback as well. Other errors keep their traceback. An
interrupted command (Ctrl-C, or a training run stopped by SIGINT/SIGTERM) ends in
"tianyuan CMD: interrupted" and exit status 130.
"""
import importlib
import os
import sys

# subcommand -> ("module", "function", one-line help)
SUBCOMMANDS = {
    "weights": ("tianyuan.zoo.commands", "weights_main",
                "list, download, verify and import weights"),
    "train": ("tianyuan.trainers.train", "main", "train or fine-tune: experiment=NAME [k=v ...]"),
    "eval": ("tianyuan.trainers.commands", "eval_main",
             "top-1/top-5: model=NAME weights=FILE data.root=DIR"),
    "quantize": ("tianyuan.trainers.quantize", "main",
                 "int8 (PTQ, QAT) + accuracy-loss table: model=NAME weights=FILE "
                 "method=ptq|qat|both"),
    "bench": ("tianyuan.trainers.commands", "bench_main",
              "latency, images/s, peak memory: model=NAME precision=fp32 batch=1"),
    "run": ("tianyuan.trainers.run_graph", "main",
            "a saved graph, without model code: FILE [--profile] [--input X.npy]"),
    "generate": ("tianyuan.trainers.generate", "main",
                 "GAN samples: model=NAME weights=FILE|NAME n=64 out=grid.png [seed=0]"),
    "fid": ("tianyuan.trainers.fid", "main",
            "FID of two image folders or .npz statistics (pytorch-fid's): A B [--save-stats]"),
    "detect": ("tianyuan.trainers.detect", "main",
               "boxes drawn on photos + COCO results: model=NAME weights=FILE input=IMG|DIR "
               "out=DIR"),
    "pose": ("tianyuan.trainers.pose", "main",
             "skeletons drawn on photos + COCO keypoint results: model=NAME weights=FILE "
             "input=IMG|DIR out=DIR [boxes=FILE | detector=NAME]"),
}


def _usage():
    lines = ["usage: tianyuan <command> [args]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, _, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


# what a user's command line, files or settings can get wrong (SerializationError and
# CorruptImageError derive from ValueError and OSError); hydra's and omegaconf's own
# errors (an unknown config group or key) are matched by module, not imported here
USER_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
               ValueError, KeyError, NotImplementedError,
               FloatingPointError)  # a training run whose loss became NaN (engine.py)


# by name, so the command line imports neither: an unreadable image (an OSError, also when a
# DataLoader worker raised it), a refused pickle, weights the user asked for offline
USER_ERROR_NAMES = ("CorruptImageError", "UnpicklingRefused", "OfflineError")


def _user_error(error):
    return (isinstance(error, USER_ERRORS) or type(error).__name__ in USER_ERROR_NAMES or
            type(error).__module__.split(".")[0] in ("hydra", "omegaconf"))


def _message(error):
    """The error's first paragraph: a DataLoader worker's error carries the worker's
    traceback after a blank line."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return str(text).strip().split("\n\n")[0].strip() or type(error).__name__


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] not in SUBCOMMANDS:
        print(f"tianyuan: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module, function, _ = SUBCOMMANDS[argv[0]]
    command = getattr(importlib.import_module(module), function)
    try:
        status = command(argv[1:]) or 0
    except KeyboardInterrupt as interrupt:   # a second Ctrl-C, or one outside a training loop
        detail = f": {interrupt}" if str(interrupt) else ""
        print(f"tianyuan {argv[0]}: interrupted{detail}", file=sys.stderr)
        status = 130
    except Exception as error:
        if not _user_error(error) or os.environ.get("TIANYUAN_TRACEBACK"):
            raise   # under mpiexec, tianyuan.distributed's excepthook then aborts the run
        message = _message(error)
        if message.startswith(f"{argv[0]}: "):  # "tianyuan quantize: quantize: ..."
            message = message[len(argv[0]) + 2:]
        print(f"tianyuan {argv[0]}: {message}\n"
              "(TIANYUAN_TRACEBACK=1 shows where it was raised)", file=sys.stderr)
        status = 2
    if status and status != 130:
        from tianyuan import distributed
        if distributed.world_size() > 1:  # the other processes may wait in an allreduce
            distributed.abort(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
