"""The commands through `tianyuan.trainers.cli.main` (what the `tianyuan` script runs)."""
import json

import pytest

import tianyuan as ty
from tianyuan.trainers import cli


def test_train_smoke_learns_then_eval_and_bench(tmp_path, capsys):
    out, shapes_root = tmp_path / "run", tmp_path / "shapes"   # 1000 train, 100 val images
    status = cli.main(["train", "experiment=smoke_shapesnet", f"data.root={shapes_root}",
                       f"out_dir={out}", "trainer.progress=false"])
    assert status == 0
    result = json.load(open(out / "results.json"))
    assert result["iterations"] == 155 and result["val_top1"] > 40.0   # chance: 10 %
    assert "val_top1" in capsys.readouterr().out
    records = [json.loads(line) for line in open(out / "log.jsonl")]
    assert {"loss", "lr", "images_per_s"} <= set(records[0]) and records[-1]["eval"]

    assert cli.main(["eval", "model=shapesnet", "data=shapes", f"data.root={shapes_root}",
                     f"weights={out}/best.safetensors", f"out={tmp_path}/eval.json",
                     "progress=false"]) == 0
    evaluated = json.load(open(tmp_path / "eval.json"))
    assert evaluated["top1"] == pytest.approx(result["best_top1"])
    assert evaluated["images"] == 100 and "top1" in capsys.readouterr().out

    assert cli.main(["bench", "model=shapesnet", "batch=2", "input_size=[3,32,32]", "repeats=2",
                     f"out={tmp_path}/bench.json"]) == 0
    assert json.load(open(tmp_path / "bench.json"))["images_per_s"] > 0


def test_smoke_resnet18_learns(tmp_path):
    """The zoo ResNet-18 (CIFAR stem) through the command, the whole smoke recipe (250 steps
    at 16x16, ~45 s on 2 cores): clearly above chance (25 %, 4 classes) on held-out images."""
    status = cli.main(["train", "experiment=smoke_resnet18", f"out_dir={tmp_path}/run",
                       f"data.root={tmp_path}/shapes", "trainer.eval_every=0",
                       "trainer.progress=false"])
    assert status == 0
    result = json.load(open(tmp_path / "run" / "results.json"))
    assert result["iterations"] == 250 and result["val_top1"] >= 50.0, result


def test_help_lists_commands_and_experiments(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(c in text for c in ("train", "eval", "bench"))
    assert cli.main(["train", "--help"]) == 0
    assert "smoke_shapesnet" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["quantize", "model=shapesnet", "method=foo"], "tianyuan quantize: method must be one of"),
    (["eval", "model=resnet19"], "resnet19"),
    (["eval", "model=shapesnet", "data.rooot=/x"], "data.rooot"),
    (["run", "/no/such.graph"], "tianyuan run: load: no such file '/no/such.graph'"),
])
def test_a_users_mistake_is_one_line_and_status_2(argv, says, capsys, monkeypatch):
    monkeypatch.delenv("TIANYUAN_TRACEBACK", raising=False)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and "TIANYUAN_TRACEBACK=1" in err
    monkeypatch.setenv("TIANYUAN_TRACEBACK", "1")
    with pytest.raises(Exception):
        cli.main(argv)


def test_an_internal_error_keeps_its_traceback(monkeypatch):
    monkeypatch.setitem(cli.SUBCOMMANDS, "boom", ("tianyuan.trainers.cli", "_usage", ""))
    with pytest.raises(TypeError):  # _usage takes no argv: not a user's mistake
        cli.main(["boom"])


def _resnet_weights(path, **kwargs):
    from tianyuan import zoo
    ty.save(zoo.get_model(**kwargs).state_dict(), str(path))
    return str(path)


def test_eval_takes_the_class_count_from_the_weights(shapes_root, tmp_path, capsys):
    weights = _resnet_weights(tmp_path / "r18_10.safetensors", name="resnet18", num_classes=10)
    assert cli.main(["eval", "model=resnet18", f"weights={weights}", "data=shapes",
                     f"data.root={shapes_root}", "progress=false",
                     f"out={tmp_path / 'e.json'}"]) == 0
    out = capsys.readouterr().out
    assert "eval: 10 classes, from the weights (fc.weight (10, 512)); the model config said " \
           "1000" in out
    assert json.load(open(tmp_path / "e.json"))["images"] == 50


def test_weights_of_another_architecture_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TIANYUAN_TRACEBACK", raising=False)
    weights = _resnet_weights(tmp_path / "r34.safetensors", name="resnet34", num_classes=10)
    assert cli.main(["eval", "model=resnet18", f"weights={weights}", "data=shapes",
                     "progress=false"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err
    assert f"tianyuan eval: weights {weights} do not fit resnet18: " in err
    assert "the model lacks" in err and "weights of another architecture?" in err


@pytest.mark.parametrize("make, says", [
    (lambda d: d / "evil.pkl", "refusing to unpickle global 'os.system'"),
    (lambda d: "resnet18.imagenet_torchvision", "TIANYUAN_OFFLINE"),
])
def test_weights_import_mistakes_are_one_line(make, says, tmp_path, capsys, monkeypatch):
    evil = tmp_path / "evil.pkl"   # protocol 2: GLOBAL os.system, "true", TUPLE1, REDUCE
    evil.write_bytes(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.")
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")
    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path / "home"))
    assert cli.main(["weights", "import", str(make(tmp_path)), "--arch", "resnet18",
                     "--out", str(tmp_path / "out.safetensors")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_corrupt_image_read_by_a_worker_is_one_line(shapes_root, tmp_path, capsys,
                                                      monkeypatch):
    import shutil
    monkeypatch.delenv("TIANYUAN_TRACEBACK", raising=False)
    root = tmp_path / "shapes"
    shutil.copytree(shapes_root, root)
    bad = sorted((root / "val").glob("*/*"))[3]
    bad.write_bytes(b"")
    assert cli.main(["eval", "model=shapesnet", "data=shapes", f"data.root={root}",
                     "data.num_workers=2", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err
    assert f"{bad}: empty image file" in err
    with pytest.warns(RuntimeWarning, match="1 items? (was|were) skipped"):
        assert cli.main(["eval", "model=shapesnet", "data=shapes", f"data.root={root}",
                         "data.num_workers=2", "progress=false", "data.on_error=skip",
                         f"out={tmp_path / 'e.json'}"]) == 0
    assert json.load(open(tmp_path / "e.json"))["images"] == 49
