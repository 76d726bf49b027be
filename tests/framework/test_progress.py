"""Progress: a tqdm bar in a terminal; one plain line per 10 % elsewhere."""
import io

from tqdm import tqdm

from tianyuan.progress import LineProgress, progress


def test_not_a_terminal_prints_a_line_per_ten_percent():
    out = io.StringIO()
    assert list(progress(range(40), "calibrate", unit="batch", file=out)) == list(range(40))
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in out.getvalue()
    assert lines[0].startswith("calibrate:  10% 4/40 batch [") and "eta" in lines[0]
    assert lines[-1].startswith("calibrate: 100% 40/40 batch")


def test_updates_postfix_and_an_early_end():
    out = io.StringIO()
    bar = progress(total=100, desc="train", initial=50, file=out)
    assert isinstance(bar, LineProgress)
    bar.set_postfix(loss="0.5")
    for _ in range(14):
        bar.update()
    bar.close()
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["60%", "64%"]   # a step, then where it ended
    assert lines[0].endswith("loss=0.5")


def test_unknown_total_prints_every_interval():
    out = io.StringIO()
    bar = LineProgress(desc="fetch", file=out, every=0.0)
    bar.update(3)
    assert out.getvalue().startswith("fetch: 3 it [")


def test_a_terminal_gets_tqdm():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    assert isinstance(progress(range(3), "x", file=Tty()), tqdm)
