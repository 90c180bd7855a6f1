"""Sampler hints for pagefs: tell the daemon the order in which an epoch will read its files.

A shuffled epoch reads a dataset in an order no read-ahead can guess. The sampler knows it, so
before each epoch HintedSampler sends the daemon that order (the epoch's "plan"), for the daemon
to fetch the files ahead of the reader in that order.

    from torch.utils.data import DataLoader, RandomSampler
    from pagefs.torch import HintedSampler

    ds = torchvision.datasets.ImageFolder("/mnt/imagenet/train")
    sampler = HintedSampler(RandomSampler(ds), ds.samples)   # (path, class) pairs work as is
    loader = DataLoader(ds, sampler=sampler, batch_size=256, num_workers=8)
    for epoch in range(90):
        sampler.set_epoch(epoch)      # forwarded to a DistributedSampler; harmless otherwise
        for images, labels in loader:
            ...

HintedSampler(sampler, paths, name=None, timeout=2.0, resolver=None)
    Wraps any sampler: RandomSampler, DistributedSampler, a batch sampler yielding lists of
    indices (pass it as DataLoader(batch_sampler=...); any other item, a tuple too, is one
    index). `paths` maps an index to its file: a sequence (paths[i]; an item may be a str,
    bytes, os.PathLike, or a tuple whose first element is the path, as ImageFolder.samples)
    or a callable (paths(i)); relative paths are relative to the current directory. At each
    __iter__ it takes the inner sampler's order for this epoch (at most MAX_ENTRIES paths of
    it; the rest, if any, is yielded unhinted), maps the indices to paths (batches
    flattened), groups them by pagefs mount, POSTs one plan per mount, then yields exactly
    the inner sampler's items in the inner sampler's order.
    set_epoch(e) is forwarded when the inner sampler has it; __len__ is the inner sampler's;
    other attributes (batch_size, drop_last, ...) are read from the inner sampler. The plan's
    name defaults to "HOSTNAME-PID-ID" (one plan per sampler, so DDP ranks and several loaders
    on one host each have their own); each epoch's POST replaces the previous epoch's plan.
    last_hint is the last epoch's {mount_root: reply} (see hint()); close() drops the plans.

    Hints are best effort. Any failure (no path on a pagefs mount, a mount without a control
    socket, a daemon without the hints API, a timeout, an error reply, an exception from
    `paths`) logs one WARNING on the "pagefs.hints" logger for the sampler's lifetime (later
    ones at DEBUG), and the epoch runs unhinted. The order yielded never depends on hints.
    Each successful POST is logged at DEBUG ("hinted N paths to ROOT ...").
    `timeout` bounds each step of a request on the socket (connect, each send, the wait for
    the reply once the body is sent), not the whole request: a big plan may take longer to
    send, but the daemon has to answer within `timeout` seconds of its last byte.

hint(paths, name=None, timeout=2.0, resolver=None) -> {mount_root: reply}
    For code without a sampler (Ray, plain loops): paths (in reading order) are grouped by
    pagefs mount and one plan per mount is POSTed; a reply is the daemon's JSON ({"name",
    "entries", "plans"}) or {"error": text, "status": HTTP status or None}. Paths on no pagefs
    mount are left out (no key). The default name is "HOSTNAME-PID": calling hint() again
    replaces the plan (a new epoch).

plans(path, timeout=2.0, resolver=None) -> [ {"name", "entries", "opened", "queued",
    "missing", "skipped", "resident"}, ... ]   the daemon's plans (GET /api/v1/hints)
drop(path, name, timeout=2.0, resolver=None) -> bool
    drops a plan (DELETE /api/v1/hints/NAME): True if dropped, False on a 404 (no such
    plan; a daemon without the hints API answers 404 too: plans() tells them apart).
    plans() and drop() take the mount root or any path inside the mount, and raise HintError
    when the daemon fails, NotPagefsError (a HintError) when the path is on no pagefs mount
    or its daemon has no control socket.

How the daemon is found (as the `pagefs` commands do): the mount root of a directory is the
topmost directory walking up from it whose st_dev is the directory's; the root's
`user.pagefs.stats` attribute (key=value lines) names the daemon's unix control socket in
`control_socket=`; no attribute: not a pagefs mount; no such line: no control socket. A
Resolver remembers directory -> (mount root, path inside it) for its lifetime (so a million
paths in a thousand directories cost a thousand directory walks) and re-reads each root's
attribute once per hint, so a daemon restarted between epochs is found again. The attribute
reader is Resolver's read_stats argument (default read_stats_xattr), which tests replace.

The daemon's API, HTTP/1.1 on the control socket (JSON bodies):
    POST   /api/v1/hints   {"name": NAME, "paths": ["train/n01/a.jpg", ...]}  paths relative
           to the mount root, in reading order, duplicates allowed, at most 4,000,000 paths
           and 256 MiB -> 200 {"name", "entries", "plans"}, 400 {"error"}, 413
    GET    /api/v1/hints   -> 200 {"plans": [...]}
    DELETE /api/v1/hints/NAME -> 200, 404 when there is no such plan

Command line, to try a daemon by hand:
    python3 -m pagefs.torch hint [--name N] [--timeout S] [PATH...]   (no PATH: one a line
                                                                      on stdin)
    python3 -m pagefs.torch plans PATH
    python3 -m pagefs.torch drop PATH NAME
prints the JSON replies; exits 0, 1 (a daemon failed) or 3 (not a pagefs mount).

Standard library only; torch is imported if it can be (HintedSampler is then a
torch.utils.data.Sampler), and nothing else here needs it. A Resolver and a HintedSampler are
used by one thread at a time.
"""

import http.client
import itertools
import json
import logging
import operator
import os
import socket
import sys
import urllib.parse

try:
    from torch.utils.data import Sampler as _SamplerBase
except Exception:  # no torch (or a broken one): a plain iterable does for everything here
    _SamplerBase = object

__all__ = ["HintedSampler", "hint", "plans", "drop", "Resolver", "HintError", "NotPagefsError",
           "read_stats_xattr", "MAX_ENTRIES", "MAX_BODY"]

log = logging.getLogger("pagefs.hints")

STATS_XATTR = "user.pagefs.stats"
API_PATH = "/api/v1/hints"
MAX_ENTRIES = 4000000  # paths in one plan the daemon takes
MAX_BODY = 256 << 20  # bytes of one POST body the daemon takes
MAX_REPLY = 64 << 20  # bytes of a reply read


class HintError(Exception):
    """A hints request that failed; status is the HTTP status (None: no reply)."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class NotPagefsError(HintError):
    """The path is on no pagefs mount, or its daemon has no control socket."""


def read_stats_xattr(root):
    """The text of ROOT's user.pagefs.stats attribute; OSError when it has none."""
    return os.getxattr(root, STATS_XATTR).decode("utf-8", "replace")


def control_socket_of(stats_text):
    """The control_socket= value of a stats text, None when it has no such line."""
    for line in stats_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key == "control_socket" and value:
            return value
    return None


_NOT_FOUND = (None, None)  # what a directory that cannot be resolved maps to


class Resolver:
    """Maps paths to (pagefs mount root, path inside it), remembering each directory.

    read_stats(root) returns the text of the root's user.pagefs.stats attribute or raises
    OSError (not a pagefs mount)."""

    def __init__(self, read_stats=read_stats_xattr):
        self.read_stats = read_stats
        self._dirs = {}  # directory as given -> (root, prefix inside the root) or _NOT_FOUND
        self._roots = {}  # real directory -> its mount root
        self._cwd = None  # the directory relative entries of _dirs were resolved from

    def _root_of(self, real, dev):
        chain = []
        cur = real
        while True:
            root = self._roots.get(cur)
            if root is not None:
                break
            chain.append(cur)
            if cur == "/":
                root = cur
                break
            parent = os.path.dirname(cur)
            try:
                if os.stat(parent).st_dev != dev:
                    root = cur
                    break
            except OSError:
                root = cur
                break
            cur = parent
        for c in chain:
            self._roots[c] = root
        return root

    def _resolve_dir(self, d):
        try:
            real = os.path.realpath(d)
            dev = os.stat(real).st_dev
        except (OSError, ValueError):
            return _NOT_FOUND
        root = self._root_of(real, dev)
        if real == root:
            return (root, "")
        return (root, real[len(root):].lstrip("/") + "/")

    def _check_cwd(self):
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = None
        if cwd != self._cwd:
            self._dirs.clear()
            self._cwd = cwd

    def group(self, paths):
        """Groups PATHS (an iterable of str, bytes, os.PathLike or (path, ...) tuples) by mount
        root, keeping their order: returns ({root: [path inside the root, ...]}, number of
        paths whose directory could not be resolved). Roots are not checked to be pagefs."""
        self._check_cwd()
        groups = {}
        dropped = []
        local = {}  # directory part as given -> (append to its root's list, prefix)
        for p in paths:
            if type(p) is not str:
                p = _as_str(p)
            d, sep, base = p.rpartition("/")
            if base == "" or base == "." or base == "..":
                d, sep, base = os.path.abspath(p).rpartition("/")
                x = self._entry(d, sep, groups, dropped)
            elif d or not sep:  # "dir/name" or "name"
                x = local.get(d)
                if x is None:
                    x = local[d] = self._entry(d, sep, groups, dropped)
            else:  # "/name"
                x = self._entry(d, sep, groups, dropped)
            x[0](x[1] + base)
        return groups, len(dropped)

    def _entry(self, d, sep, groups, dropped):
        """(where to append, prefix to put before the name) for the paths of directory D."""
        key = d if d else ("/" if sep else ".")
        e = self._dirs.get(key)
        if e is None:
            e = self._dirs[key] = self._resolve_dir(key)
        root, prefix = e
        if root is None:
            return dropped.append, ""
        g = groups.get(root)
        if g is None:
            g = groups[root] = []
        return g.append, prefix

    def control_socket(self, root):
        """(socket path, None) for a pagefs mount root with a control socket; (None, reason)
        otherwise; reason is None when ROOT is not a pagefs mount at all."""
        try:
            text = self.read_stats(root)
        except OSError:
            return None, None
        sock = control_socket_of(text)
        if sock is None:
            return None, "the daemon of %s has no control socket" % root
        return sock, None

    def mount(self, path):
        """(mount root, control socket) of PATH (a file or directory inside a pagefs mount);
        NotPagefsError when it is on none or the daemon has no control socket."""
        p = os.fspath(path)
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        d = os.path.realpath(p)
        if not os.path.isdir(d):
            d = os.path.dirname(d)
        root, _ = self._resolve_dir(d)
        if root is None:
            raise NotPagefsError("%s: no such directory" % d)
        sock, reason = self.control_socket(root)
        if sock is None:
            raise NotPagefsError(reason or "%s is not on a pagefs mount" % p)
        return root, sock


def _as_str(p):
    if isinstance(p, tuple):  # (path, class) as ImageFolder.samples
        p = p[0]
    p = os.fspath(p)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    return p


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix stream socket (the daemon's control socket)."""

    def __init__(self, socket_path, timeout=2.0):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.socket_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _request(sock_path, method, url, body=None, timeout=2.0):
    """(status, JSON reply or None) of one request; HintError when there is no reply."""
    conn = UnixHTTPConnection(sock_path, timeout=timeout)
    try:
        headers = {"Connection": "close"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, url, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon answered before it read the whole body (a 413, a 404): read that
        resp = conn.getresponse()
        data = resp.read(MAX_REPLY)
        status = resp.status
    except (OSError, http.client.HTTPException) as e:
        raise HintError("%s %s on %s: %s" % (method, url, sock_path,
                                             e.__class__.__name__ + (": %s" % e if str(e) else "")))
    finally:
        conn.close()
    try:
        reply = json.loads(data) if data else None
    except ValueError:
        reply = None
    return status, reply


def _error_text(status, reply, what):
    if isinstance(reply, dict) and isinstance(reply.get("error"), str):
        detail = reply["error"]
    else:
        detail = http.client.responses.get(status, "")
    if status in (404, 405) and what == "hints":
        detail = "the daemon has no hints API (too old?)" + (": " + detail if detail else "")
    elif status == 413:
        detail = "plan too large" + (": " + detail if detail else "")
    return "%s: HTTP %d%s" % (what, status, ": " + detail if detail else "")


def _json_body(name, paths):
    """{"name": NAME, "paths": PATHS} as UTF-8 JSON; UnicodeEncodeError for a string UTF-8
    cannot carry (a lone surrogate: undecodable bytes of a local file name)."""
    if paths:
        joined = "".join(paths)
        if joined.isprintable() and '"' not in joined and "\\" not in joined:
            # Nothing to escape (no control character, quote, backslash or surrogate): the
            # strings go in as they are, in a third of the JSON encoder's time.
            return ('{"name": %s, "paths": ["%s"]}' % (json.dumps(name, ensure_ascii=False),
                                                       '", "'.join(paths))).encode("utf-8")
    return json.dumps({"name": name, "paths": paths}, ensure_ascii=False,
                      check_circular=False).encode("utf-8")


def _encode_plan(name, rel_paths):
    """The POST body of a plan, within MAX_ENTRIES and MAX_BODY (the first paths kept); paths
    UTF-8 cannot carry are left out. Returns (body, number of paths in it)."""
    if len(rel_paths) > MAX_ENTRIES:
        rel_paths = rel_paths[:MAX_ENTRIES]
    try:
        body = _json_body(name, rel_paths)
    except UnicodeEncodeError:
        rel_paths = [p for p in rel_paths if _utf8_ok(p)]
        body = _json_body(name, rel_paths)
    n = len(rel_paths)
    while len(body) > MAX_BODY and n > 0:
        n = int(n * (MAX_BODY / len(body)) * 0.98)
        body = _json_body(name, rel_paths[:n])
    return body, n


def _utf8_ok(p):
    try:
        p.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _post(sock_path, name, rel_paths, timeout):
    body, n = _encode_plan(name, rel_paths)
    if n < len(rel_paths):
        log.info("pagefs hints: plan %s: %d of its %d paths sent (the daemon's limits; names "
                 "UTF-8 cannot carry)", name, n, len(rel_paths))
    try:
        status, reply = _request(sock_path, "POST", API_PATH, body, timeout)
    except HintError as e:
        return {"error": str(e), "status": None}
    if status != 200 or not isinstance(reply, dict):
        return {"error": _error_text(status, reply, "hints"), "status": status}
    return reply


def _hint(resolver, paths, name, timeout):
    """({root: reply}, number of paths left out as on no pagefs mount, {root: control socket}
    of the plans taken)."""
    groups, left_out = resolver.group(paths)
    results = {}
    taken = {}
    for root, rel in groups.items():
        sock, reason = resolver.control_socket(root)
        if sock is None:
            if reason is None:
                left_out += len(rel)  # not a pagefs mount
            else:
                results[root] = {"error": reason, "status": None}
            continue
        results[root] = _post(sock, name, rel, timeout)
        if "error" not in results[root]:
            taken[root] = sock
            log.debug("pagefs hints: hinted %d paths to %s (plan %s): %s", len(rel), root, name,
                      results[root])
    return results, left_out, taken


def default_name():
    return "%s-%d" % (socket.gethostname(), os.getpid())


def hint(paths, name=None, timeout=2.0, resolver=None):
    """Sends the reading order PATHS to the pagefs daemons of their mounts, one plan per mount
    named NAME (default "HOSTNAME-PID"). Returns {mount_root: the daemon's JSON reply, or
    {"error": text, "status": HTTP status or None}}; paths on no pagefs mount are left out.
    Never raises for a daemon's failure."""
    return _hint(resolver or Resolver(), paths, name or default_name(), timeout)[0]


def plans(path, timeout=2.0, resolver=None):
    """The plans of the daemon serving PATH (its mount root or any path inside the mount)."""
    root, sock = (resolver or Resolver()).mount(path)
    status, reply = _request(sock, "GET", API_PATH, None, timeout)
    if status != 200 or not isinstance(reply, dict) or not isinstance(reply.get("plans"), list):
        raise HintError(_error_text(status, reply, "hints"), status)
    return reply["plans"]


def drop(path, name, timeout=2.0, resolver=None):
    """Drops plan NAME of the daemon serving PATH: True if dropped, False if it had none."""
    root, sock = (resolver or Resolver()).mount(path)
    return _drop(sock, name, timeout)


def _drop(sock, name, timeout):
    url = API_PATH + "/" + urllib.parse.quote(name, safe="")
    status, reply = _request(sock, "DELETE", url, None, timeout)
    if status == 200:
        return True
    if status == 404:  # no such plan (a daemon without the hints API answers 404 too)
        return False
    raise HintError(_error_text(status, reply, "hints"), status)


class HintedSampler(_SamplerBase):
    """A sampler that hints each epoch's reading order to pagefs (see the module's doc)."""

    def __init__(self, sampler, paths, name=None, timeout=2.0, resolver=None):
        self.sampler = sampler
        self.paths = paths
        self.name = name or "%s-%d" % (default_name(), id(self))
        self.timeout = timeout
        self.resolver = resolver or Resolver()
        self.last_hint = None  # {mount_root: reply} of the last epoch
        self._warned = False
        self._sockets = {}  # mount root -> control socket of the plans posted

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __getattr__(self, attr):
        # Only called for attributes not found on self: batch_size, drop_last, ... of the
        # inner sampler. Never for dunders, nor before __init__ set self.sampler (unpickling).
        if attr.startswith("__") or "sampler" not in self.__dict__:
            raise AttributeError(attr)
        return getattr(self.sampler, attr)

    def __iter__(self):
        it = iter(self.sampler)
        head = list(itertools.islice(it, 1))
        if head and isinstance(head[0], list):  # a batch sampler: count the indices
            entries = len(head[0])
            if entries < MAX_ENTRIES:
                for batch in it:
                    head.append(batch)
                    entries += len(batch)
                    if entries >= MAX_ENTRIES:
                        break
        elif head:
            head.extend(itertools.islice(it, MAX_ENTRIES - 1))
        self._hint(head)
        yield from head
        yield from it  # what an endless sampler (or one past MAX_ENTRIES) has after the head

    def _paths_of(self, items):
        if items and isinstance(items[0], list):  # batches
            items = itertools.chain.from_iterable(items)
        if callable(self.paths):
            return map(self.paths, items)
        paths = map(self.paths.__getitem__, items)
        p = self.paths
        if isinstance(p, (list, tuple)) and p and isinstance(p[0], tuple):  # ImageFolder.samples
            return map(operator.itemgetter(0), paths)
        return paths

    def _warn(self, fmt, *args):
        if self._warned:
            log.debug(fmt, *args)
        else:
            self._warned = True
            log.warning(fmt + "; the epoch runs unhinted (later failures of this sampler are "
                        "logged at DEBUG)", *args)

    def _hint(self, items):
        try:
            results, left_out, taken = _hint(self.resolver, self._paths_of(items), self.name,
                                             self.timeout)
        except Exception as e:
            self.last_hint = None
            self._warn("pagefs hints: plan %s not sent: %s: %s", self.name,
                       e.__class__.__name__, e)
            return
        self.last_hint = results
        self._sockets.update(taken)
        failed = [(r, v["error"]) for r, v in results.items() if "error" in v]
        if failed:
            self._warn("pagefs hints: plan %s not taken by %d mount(s): %s", self.name,
                       len(failed), "; ".join("%s: %s" % f for f in failed))
        elif not results and items:
            self._warn("pagefs hints: plan %s: none of its %d paths is on a pagefs mount",
                       self.name, left_out)

    def close(self):
        """Drops this sampler's plans from the daemons it sent them to (best effort)."""
        for root, sock in list(self._sockets.items()):
            try:
                _drop(sock, self.name, self.timeout)
            except HintError as e:
                log.debug("pagefs hints: drop of plan %s on %s: %s", self.name, root, e)
            del self._sockets[root]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main(argv=None, resolver=None):
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m pagefs.torch",
                                 description="pagefs sampler hints by hand "
                                             "(see pydoc3 pagefs.torch)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hint", help="send a plan: PATHs, or one a line on stdin")
    h.add_argument("--name", default=None)
    h.add_argument("--timeout", type=float, default=10.0)
    h.add_argument("paths", nargs="*")
    p = sub.add_parser("plans", help="the daemon's plans")
    p.add_argument("path")
    p.add_argument("--timeout", type=float, default=10.0)
    d = sub.add_parser("drop", help="drop a plan")
    d.add_argument("path")
    d.add_argument("name")
    d.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args(argv)
    resolver = resolver or Resolver()
    try:
        if args.cmd == "hint":
            paths = args.paths or [line.rstrip("\n") for line in sys.stdin if line.strip()]
            out = hint(paths, args.name, args.timeout, resolver)
            print(json.dumps(out, indent=2, ensure_ascii=False))
            if not out:
                return 3
            return 1 if any("error" in v for v in out.values()) else 0
        if args.cmd == "plans":
            print(json.dumps(plans(args.path, args.timeout, resolver), indent=2,
                             ensure_ascii=False))
            return 0
        dropped = drop(args.path, args.name, args.timeout, resolver)
        print(json.dumps({"dropped": dropped}))
        return 0 if dropped else 1
    except HintError as e:
        print("pagefs.torch: %s" % e, file=sys.stderr)
        return 3 if isinstance(e, NotPagefsError) else 1


if __name__ == "__main__":
    sys.exit(main())
