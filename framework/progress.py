"""Progress of long work (training, evaluation, calibration, timing, export, downloads).

In a terminal a tqdm bar with its rate and ETA. Elsewhere (a log file, CI, `| tee`) tqdm's
redraws would join into one line of carriage returns, so the same calls print one plain
line per 10 % instead, with the ETA: `calibrate: 40% 13/32 batch [6.1 s, eta 8.9 s]`.

>>> for batch in progress(loader, "calibrate", unit="batch"):
...     ...
"""
import sys
import time

from tqdm import tqdm


def progress(iterable=None, desc="", total=None, unit="it", disable=False, initial=0,
             file=None):
    """A tqdm bar where `file` (stderr) is a terminal, else a LineProgress; both iterate
    `iterable` and take update / set_postfix / set_postfix_str / close."""
    file = file or sys.stderr
    if disable or _is_terminal(file):
        return tqdm(iterable, desc=desc, total=total, unit=unit, initial=initial,
                    disable=disable, dynamic_ncols=True, file=file)
    return LineProgress(iterable, desc, total, unit, initial, file)


def _is_terminal(file):
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False


class LineProgress:
    """One line per `step` of the total (10 %), or every `every` seconds without a total."""

    def __init__(self, iterable=None, desc="", total=None, unit="it", initial=0, file=None,
                 step=0.1, every=30.0):
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.desc, self.total, self.unit = iterable, desc, total, unit
        self.n, self.file, self.step, self.every = initial, file or sys.stderr, step, every
        self.start = self.last_time = time.perf_counter()
        self.shown = initial / total if total else 0.0
        self.postfix, self.closed = "", False

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __len__(self):
        return self.total or 0

    def update(self, n=1):
        self.n += n
        now = time.perf_counter()
        if self.total:
            if self.n / self.total >= self.shown + self.step - 1e-9 or self.n >= self.total:
                self.shown = self.n / self.total
                self._line(now)
        elif now - self.last_time >= self.every:
            self._line(now)

    def set_postfix(self, refresh=False, **values):
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text="", refresh=False):
        self.postfix = str(text)

    def write(self, text):
        print(text, file=self.file, flush=True)

    def close(self):
        if not self.closed and self.n and (not self.total or self.n < self.total):
            self._line(time.perf_counter())     # where it ended, if not at a step already
        self.closed = True

    def _line(self, now):
        self.last_time = now
        elapsed = now - self.start
        if self.total:
            eta = elapsed / max(self.n, 1e-9) * max(self.total - self.n, 0)
            head = (f"{self.desc}: {100 * self.n / self.total:3.0f}% {self.n}/{self.total} "
                    f"{self.unit} [{elapsed:.1f} s, eta {eta:.1f} s]")
        else:
            head = f"{self.desc}: {self.n} {self.unit} [{elapsed:.1f} s]"
        print(head + (f" {self.postfix}" if self.postfix else ""), file=self.file, flush=True)
