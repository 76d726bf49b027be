"""What every classification model shares: the classifier head, fuse groups, weight loading.

Conventions (read by `tianyuan.quantization.quantize_qat` and the trainers):

- `model.fuse_groups()` lists dotted submodule names to fuse, each `[conv, bn]` or
  `[conv, bn, act]` (act a ReLU or ReLU6 module), in forward order; the data flows
  conv -> bn -> act with nothing in between.
- `model.classifier_name` is the dotted name of the final Linear (`"fc"`,
  `"classifier.1"`); `reset_classifier(n)` replaces it, initialised as the builder does.
- Every activation is its own module, called once per forward; residual adds and
  concats are `nn.AddReLU` / `nn.Add` / `nn.Concat` modules; `quant` / `dequant` stubs
  wrap the network.
"""
import logging

from tianyuan import nn

logger = logging.getLogger("tianyuan.zoo")


def conv_bn_act(in_ch, out_ch, kernel_size, stride=1, groups=1, act=nn.ReLU):
    """Sequential(conv, bn[, act]) with no conv bias: names `.0`, `.1`, `.2` (torchvision's)."""
    layers = [nn.Conv2d(in_ch, out_ch, kernel_size, stride, (kernel_size - 1) // 2,
                        groups=groups, bias=False), nn.BatchNorm2d(out_ch)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def seq_groups(prefix, seq):
    """Fuse groups inside a Sequential: each Conv2d with the BatchNorm2d (and ReLU/ReLU6)
    right after it, e.g. branch2 -> [[b.0, b.1, b.2], [b.3, b.4], [b.5, b.6, b.7]]."""
    mods = list(seq)
    groups = []
    for i, module in enumerate(mods):
        if not isinstance(module, nn.Conv2d):
            continue
        if i + 1 >= len(mods) or not isinstance(mods[i + 1], nn.BatchNorm2d):
            continue
        group = [f"{prefix}.{i}", f"{prefix}.{i + 1}"]
        if i + 2 < len(mods) and isinstance(mods[i + 2], (nn.ReLU, nn.ReLU6)):
            group.append(f"{prefix}.{i + 2}")
        groups.append(group)
    return groups


def kaiming_init(model):
    """torchvision's ResNet init: conv weights kaiming-normal (fan_out, relu), BN 1 and 0,
    conv biases 0; Linear layers keep their default (fan-in uniform)."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


class Classifier(nn.Module):
    """Base of the zoo's classifiers: `reset_classifier` over `classifier_name`/`_new_head`."""

    classifier_name = "fc"

    def _new_head(self, in_features, num_classes):
        return nn.Linear(in_features, num_classes)

    def reset_classifier(self, num_classes):
        """A new `num_classes`-way head (fine-tuning); returns self."""
        if int(num_classes) < 1:
            raise ValueError(f"{type(self).__name__}.reset_classifier: num_classes must be "
                             f">= 1, got {num_classes}")
        parent_name, _, leaf = self.classifier_name.rpartition(".")
        parent = self.get_submodule(parent_name)
        old = getattr(parent, leaf)
        setattr(parent, leaf, self._new_head(old.in_features, int(num_classes)))
        self.num_classes = int(num_classes)
        return self

    def fuse_groups(self):
        raise NotImplementedError(f"{type(self).__name__}: fuse_groups() is not implemented")


def chosen_weights(arch, weights=None, pretrained=False):
    """The weights to load: `weights` (manifest name or file), the arch's default manifest
    entry with `pretrained`, or None."""
    if pretrained and weights is not None:
        raise ValueError(f"{arch}: give weights=... or pretrained=True, not both")
    if pretrained:
        from tianyuan.weights import default_entry
        return default_entry(arch).name
    return weights


def load_into(model, arch, weights=None, pretrained=False):
    """Load `weights` (manifest name or file) or, with `pretrained`, the arch's default entry.

    A head of another size than the file's is left as initialised and said so (fine-tuning).
    """
    weights = chosen_weights(arch, weights, pretrained)
    if weights is None:
        return model
    from tianyuan.weights import load_weights
    # the file's own classifier size is kept; the model's load_state_dict checks the rest
    state = load_weights(weights, arch=arch)
    head = {f"{model.classifier_name}.weight", f"{model.classifier_name}.bias"}
    file_head = state.get(f"{model.classifier_name}.weight")
    if file_head is None or file_head.shape[0] == model.num_classes:
        model.load_state_dict(state, strict=True)
        return model
    body = {k: v for k, v in state.items() if k not in head}
    expected = set(model.state_dict(keep_vars=True)) - head
    if set(body) != expected:
        model.load_state_dict(body, strict=True)   # raises, naming every key, copies nothing
    model.load_state_dict(body, strict=False)
    logger.warning("%s: loaded %s without its %d-class classifier; %r is a new %d-class "
                   "head", arch, weights, file_head.shape[0], model.classifier_name,
                   model.num_classes)
    return model
