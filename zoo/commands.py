"""`tianyuan weights ...` with the zoo's specs: `import` checks a converted file against the
model it is for (built here; the weights layer never imports the zoo).

    tianyuan weights import resnet50-0676ba61.pth --arch resnet50 --out r50.safetensors
"""
from ..weights import cli as weights_cli
from .registry import model_spec


def weights_main(argv=None):
    return weights_cli.main(argv, spec_for=model_spec)
