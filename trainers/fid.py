"""`tianyuan fid A B`: the FID between two folders of images or statistics files, as
pytorch-fid's command line computes it.

    tianyuan fid samples/ cifar10_train.npz              # FID:  23.41...
    tianyuan fid real/ --save-stats real.npz             # pytorch-fid's npz (mu, sigma)
    tianyuan fid samples/ real.npz --n 5000 --out fid.json   # a quick look on 5000 images

Each of A and B is a folder (its images, not its sub-folders; see
evaluation/image_files.py) or an `.npz` with `mu` and `sigma` (pytorch-fid's, TTUR's, or
one `--save-stats` wrote). The network is pytorch-fid's Inception (`--weights`: a file, or
a manifest name; by default fid_inception_v3.imagenet_tf2015_pytorch_fid from the weights
cache); it is loaded only when a folder is given. Fewer images than 2048 give a
rank-deficient covariance: a warning line says so.
"""
import argparse
import json
import os
import sys
import warnings

DEFAULT_WEIGHTS = "fid_inception_v3.imagenet_tf2015_pytorch_fid"


def _parser():
    parser = argparse.ArgumentParser(
        prog="tianyuan fid", description="Frechet Inception Distance of two folders of images "
        "or .npz statistics files (pytorch-fid's)")
    parser.add_argument("path", nargs=2, help="folders of images or .npz statistics files; "
                        "with --save-stats: a folder and the .npz to write")
    parser.add_argument("--batch-size", type=int, default=50, help="images per forward")
    parser.add_argument("--save-stats", action="store_true",
                        help="write the first path's statistics to the second (an .npz)")
    parser.add_argument("--weights", default=DEFAULT_WEIGHTS,
                        help="the Inception weights: a file or a manifest name")
    parser.add_argument("--dims", type=int, default=2048, choices=[2048],
                        help="feature dimensions (the final pool's 2048 only)")
    parser.add_argument("--n", type=int, help="only the first N images of each folder")
    parser.add_argument("--out", help="also write the result as JSON here")
    parser.add_argument("--num-threads", type=int, help="threads for the native kernels")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def load_model(weights):
    """pytorch-fid's Inception with `weights`; a failed download says how to get the file."""
    from tianyuan import zoo
    from tianyuan.weights import DownloadError, OfflineError, entry_path, get_entry
    try:
        return zoo.fid_inception_v3(weights=weights)
    except OfflineError:
        raise
    except DownloadError as error:
        entry = get_entry(weights)
        raise ValueError(f"could not download {entry.file_name} ({str(error).splitlines()[-1]}"
                         f"); fetch {entry.urls[0]} and put it at {entry_path(entry)}, or give "
                         "--weights FILE (weights/README.md: on a machine without internet)"
                         ) from None


def _check_paths(args):
    for path in args.path[:1] if args.save_stats else args.path:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such folder or file")
    if args.save_stats and os.path.exists(args.path[1]):
        raise ValueError(f"{args.path[1]} exists; --save-stats does not overwrite it")
    if args.save_stats and not os.path.isdir(args.path[0]):
        raise ValueError(f"--save-stats: {args.path[0]} must be a folder of images")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")


def _statistics(path, args, model):
    from tianyuan.evaluation import gan
    if path.endswith(".npz"):
        return gan.load_statistics(path)
    print(f"fid: {path}", flush=True)
    return gan.folder_statistics(path, model(), args.batch_size, not args.no_progress, args.n)


def run(args):
    """The FID (or, with --save-stats, the path written) of the parsed arguments."""
    from tianyuan.evaluation import gan
    from .config import use_threads
    _check_paths(args)
    use_threads(args.num_threads)
    built = []

    def model():   # loaded once, and only for a folder
        if not built:
            built.append(load_model(args.weights))
        return built[0]

    if args.save_stats:
        mu, sigma = _statistics(args.path[0], args, model)
        return {"saved": gan.save_statistics(args.path[1], mu, sigma)}
    stats = [_statistics(path, args, model) for path in args.path]
    return {"fid": gan.frechet_distance(*stats[0], *stats[1]), "paths": list(args.path),
            "weights": args.weights if built else None, "n": args.n}


def _show_warning(message, category, *_args, **_kwargs):
    print(f"tianyuan fid: warning: {message}", file=sys.stderr, flush=True)


def main(argv=None):
    args = _parser().parse_args(argv)
    from tianyuan.evaluation.gan import FIDWarning
    with warnings.catch_warnings():
        warnings.simplefilter("always", FIDWarning)
        warnings.showwarning = _show_warning
        result = run(args)
    if args.save_stats:
        print(f"fid: statistics of {args.path[0]} written to {result['saved']}")
    else:
        print("FID: ", result["fid"])       # pytorch-fid's line
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0
