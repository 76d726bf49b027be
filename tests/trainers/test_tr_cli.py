"""The commands through `tianyuan.trainers.cli.main` (what the `tianyuan` script runs)."""
import json

import pytest

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
