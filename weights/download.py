"""Download cache: resumable, verified, locked downloads into `$TIANYUAN_HOME`.

A file is fetched into `<dest>.partial` (resumed with HTTP Range requests after a
dropped connection), its sha256 checked (full digest, or the prefix a publisher
encodes in the file name), and only then moved into place with `os.replace`, so a
file at `dest` is always complete. A lock file (`fcntl.flock` on `<dest>.lock`, deleted
when done) makes two processes fetching the same file produce one good copy: the second
waits, then finds the file done. `TIANYUAN_OFFLINE=1` never opens a socket.

>>> path = fetch(["https://download.pytorch.org/models/resnet18-f37072fd.pth"],
...              cache_path("torchvision/resnet18-f37072fd.pth"), "f37072fd", "prefix")
"""
import fcntl
import hashlib
import http.client
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request

from tqdm import tqdm

CHUNK = 1 << 16
# HTTP statuses that will not get better by asking again.
_PERMANENT = {400, 401, 403, 404, 405, 410, 451}


class DownloadError(RuntimeError):
    """Every source for a file failed (the message lists each failure)."""


class ChecksumError(DownloadError):
    """A downloaded or cached file's sha256 does not match the manifest."""


class OfflineError(DownloadError):
    """`TIANYUAN_OFFLINE=1` and the file is not in the cache."""


def tianyuan_home():
    """`$TIANYUAN_HOME`, default `~/.cache/tianyuan`."""
    home = os.environ.get("TIANYUAN_HOME") or os.path.join("~", ".cache", "tianyuan")
    return os.path.abspath(os.path.expanduser(home))


def cache_path(relative):
    """Where a cached file lives: `$TIANYUAN_HOME/weights/<relative>`."""
    return os.path.join(tianyuan_home(), "weights", relative)


def is_offline():
    return os.environ.get("TIANYUAN_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_digest(path, sha256, kind="full"):
    """Raise ChecksumError unless `path` matches. `kind`: full | prefix | none."""
    if not sha256 or kind == "none":
        return sha256_file(path)
    actual = sha256_file(path)
    expected = sha256.lower()
    ok = actual.startswith(expected) if kind == "prefix" else actual == expected
    if not ok:
        what = "prefix " if kind == "prefix" else ""
        raise ChecksumError(f"{path}: sha256 is {actual}, expected {what}{expected}")
    return actual


def fetch(urls, dest, sha256=None, kind="full", progress=True, timeout=30.0, retries=4,
          backoff=0.5):
    """Make `dest` a verified copy of the first source in `urls` that works; return `dest`.

    `urls`: http(s)://, file:// or local paths, tried in order (mirrors). An existing
    `dest` is trusted as is (`verify_file` re-checks it); only new downloads are hashed.
    """
    urls = [urls] if isinstance(urls, str) else list(urls)
    if os.path.exists(dest):
        return dest
    if is_offline() and not any(_is_local(u) for u in urls):
        raise OfflineError(_offline_message(urls, dest))
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    with _FileLock(dest + ".lock"):
        if os.path.exists(dest):  # another process finished it while we waited
            return dest
        failures = []
        for url in urls:
            if is_offline() and not _is_local(url):
                failures.append(f"{url}: skipped (TIANYUAN_OFFLINE=1)")
                continue
            try:
                _fetch_one(url, dest, sha256, kind, progress, timeout, retries, backoff)
                return dest
            except ChecksumError as error:
                failures.append(f"{url}: {error}; deleted the bad file")
            except (OSError, DownloadError) as error:
                failures.append(f"{url}: {error}")
        if all(f.endswith("(TIANYUAN_OFFLINE=1)") for f in failures):
            raise OfflineError(_offline_message(urls, dest))
        bad = [f for f in failures if "sha256" in f]
        kind_error = ChecksumError if bad and len(bad) == len(failures) else DownloadError
        raise kind_error(f"could not fetch {os.path.basename(dest)}:\n  " + "\n  ".join(failures))


def _offline_message(urls, dest):
    return (f"TIANYUAN_OFFLINE=1 and {os.path.basename(dest)} is not cached. On a machine "
            f"with internet download {urls[0]} and put it at {dest} (or point TIANYUAN_HOME "
            "at a folder that has it, or convert a local file with `tianyuan weights import`).")


def _is_local(url):
    return url.startswith("file://") or "://" not in url


def _local_path(url):
    if url.startswith("file://"):
        return urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    return os.path.expanduser(url)


def _fetch_one(url, dest, sha256, kind, progress, timeout, retries, backoff):
    partial = dest + ".partial"
    if _is_local(url):
        source = _local_path(url)
        if not os.path.isfile(source):
            raise DownloadError(f"no such file {source}")
        shutil.copyfile(source, partial)
    else:
        _http_with_retries(url, partial, progress, timeout, retries, backoff)
    try:
        check_digest(partial, sha256, kind)
    except ChecksumError:
        os.remove(partial)
        raise
    os.replace(partial, dest)


def _http_with_retries(url, partial, progress, timeout, retries, backoff):
    for attempt in range(retries + 1):
        try:
            _http_resume(url, partial, progress, timeout)
            return
        except urllib.error.HTTPError as error:
            if error.code in _PERMANENT or attempt == retries:
                raise DownloadError(f"HTTP {error.code} {error.reason}") from error
        except (OSError, http.client.HTTPException, _ShortRead) as error:
            if attempt == retries:
                raise DownloadError(f"failed after {retries + 1} tries ({error})") from error
        time.sleep(backoff * 2 ** attempt)


class _ShortRead(Exception):
    """The connection closed before Content-Length bytes arrived (resume from here)."""


def _http_resume(url, partial, progress, timeout):
    have = os.path.getsize(partial) if os.path.exists(partial) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "tianyuan"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # nothing left to send: the partial is whole
            return
        raise
    with response:
        if have and response.status != 206:  # server ignored Range: start over
            have = 0
        length = response.headers.get("Content-Length")
        expected = int(length) if length is not None else None
        total = have + expected if expected is not None else None
        got = _copy_body(response, partial, have, total, progress, os.path.basename(url))
    if expected is not None and got < expected:
        raise _ShortRead(f"got {got} of {expected} bytes")


def _copy_body(response, partial, have, total, progress, label):
    got = 0
    with open(partial, "ab" if have else "wb") as out, \
            tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=label,
                 disable=not progress, leave=False) as bar:
        while True:
            block = response.read(CHUNK)
            if not block:
                return got
            out.write(block)
            got += len(block)
            bar.update(len(block))


class _FileLock:
    """An exclusive `flock` on `path` held for the `with` block (released if the process
    dies); the holder deletes the file on the way out, so no `.lock` stays behind. A waiter
    that then gets the lock of the deleted file opens the path again (the inode check), so
    two processes never hold locks on two different files of one name."""

    def __init__(self, path):
        self.path = path
        self.handle = None

    def __enter__(self):
        while True:
            handle = open(self.path, "a")
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino:
                    self.handle = handle
                    return self
            except FileNotFoundError:
                pass
            handle.close()          # deleted by the holder we waited for: lock the new one

    def __exit__(self, *exc):
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
