"""Flags and environment in, one validated `Settings` out.

Flags win over environment variables, which win over the defaults (groups.py). Each option is
validated by its row's check (options.py); what one option means for another is checked after,
in `_reconcile`. A bad value raises `ConfigError` naming the flag, so the CLI can exit with one
line instead of a traceback (docs/contract.md "Bad configuration").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core.policy.urlpolicy import UrlRefused, check, parse_prefix
from proxy.core.storage.topology import parse_redis_url
from proxy.settings.checks import ConfigError, split
from proxy.settings.groups import QUEUED_TOTAL_PER_KEY, Settings
from proxy.settings.options import OPTIONS, Option

# Options that may not be given together: two lists of the fleet would disagree sooner or later.
_EXCLUSIVE = (("replicas", "upstreams"),)


def build_settings(flags: Mapping[str, object], env: Mapping[str, str]) -> Settings:
    """Merge parsed flags (None or empty = not given) with `PROXY_*` variables, then validate."""
    raw = {opt.name: _given(opt, flags, env) for opt in OPTIONS}
    for first, second in _EXCLUSIVE:
        if _present(raw[first]) and _present(raw[second]):
            one, other = _option(first), _option(second)
            raise ConfigError(one.flag_name, f"give either {one.flag_name} or {other.flag_name} "
                                             f"({other.env_names[0]}), not both")
    values = {opt.name: opt.parse(raw[opt.name], opt.flag_name)
              for opt in OPTIONS if _present(raw[opt.name])}
    return _reconcile(Settings.of(**values), given=set(values))


def _given(opt: Option, flags: Mapping[str, object], env: Mapping[str, str]) -> object:
    """The option's raw value: its flag's, else its environment variable's, else None."""
    value = flags.get(opt.dest) if opt.help is not None else None
    if _present(value):
        return value
    if opt.switch:
        return None
    found = next((v for name in opt.env_names if (v := env.get(name))), None)
    return split(found) if opt.repeat and found is not None else found


def _present(value: object) -> bool:
    return value is not None and value is not False and value not in ("", [], ())


def _option(name: str) -> Option:
    return next(opt for opt in OPTIONS if opt.name == name)


def _reconcile(settings: Settings, given: set[str]) -> Settings:
    """What one option means for another."""
    fleet, cache, server = settings.fleet, settings.cache, settings.server
    if not fleet.upstreams and fleet.replicas:
        settings = settings.replace(upstreams=tuple(spec.url for spec in fleet.replicas))
    if cache.mode == "semantic" and not cache.embedding_model:
        # Said at start rather than at the first request: semantic needs vectors from the fleet.
        raise ConfigError("--embedding-model", "`--cache semantic` needs the name of a model "
                                               "the fleet serves on /v1/embeddings")
    _check_store(settings)
    _check_hosted_servers(settings)
    admin = settings.tenancy.admin_key
    if admin is not None and admin in settings.tenancy.accepted_keys():
        # One key for both would let every holder of the client key run the admin API.
        raise ConfigError("--admin-key", "must not be one of the client keys (--api-key, "
                                         "--keys-file)")
    if server.workers > 1 and not settings.store.redis_url:
        # The embedded store lives in one process's memory: N processes would be N proxies
        # that cannot see each other's responses, streams or jobs.
        raise ConfigError("--workers", "more than one process needs a shared store: "
                                       "give --redis-url (or use --workers 1)")
    settings = _queue_bounds(settings, given)
    body = settings.limits.max_body_bytes
    if "max_sealed_bytes" not in given:
        # 1 MiB, or the body limit when that is smaller (a small --max-body-bytes still starts).
        return settings.replace(max_sealed_bytes=min(settings.sealing.max_bytes, body))
    if settings.sealing.max_bytes > body:
        raise ConfigError("--max-sealed-bytes", f"must be at most --max-body-bytes ({body})")
    return settings


def _queue_bounds(settings: Settings, given: set[str]) -> Settings:
    """The whole job queue's bound follows one key's share unless given; given, it must hold
    at least one key's share (or that share could never be reached)."""
    jobs = settings.jobs
    if "max_queued_jobs_total" not in given:
        return settings.replace(max_queued_jobs_total=QUEUED_TOTAL_PER_KEY * jobs.max_queued)
    if jobs.max_queued_total < jobs.max_queued:
        raise ConfigError("--max-queued-jobs-total",
                          f"must be at least --max-queued-jobs ({jobs.max_queued})")
    return settings


def _check_store(settings: Settings) -> None:
    store = settings.store
    if store.wait_replicas and store.redis_url and \
            parse_redis_url(store.redis_url).kind == "cluster":
        # WAIT counts the writes of the connection it is sent on; the cluster client's
        # pipeline sends a keyless WAIT to any node, so it would count nothing of ours.
        raise ConfigError("--redis-wait-replicas", "not supported on a Redis Cluster "
                                                   "(redis+cluster://) yet: give 0")
    if store.wait_replicas and not store.redis_url:
        raise ConfigError("--redis-wait-replicas", "the embedded store has no replicas: "
                                                   "give --redis-url (or 0)")


def _check_hosted_servers(settings: Settings) -> None:
    """A hosted tool's MCP server must be one `--mcp-allow` admits, as a request's must: said
    here, at start, as every bad flag is (the runner checks it again when it is built)."""
    mcp = settings.mcp
    if mcp.code_interpreter_url is None:
        return
    flag = "--code-interpreter-mcp"
    if not mcp.allow:
        raise ConfigError(flag, "an MCP server needs --mcp-allow PREFIX admitting its URL")
    try:
        check(mcp.code_interpreter_url, tuple(parse_prefix(p) for p in mcp.allow),
              "--mcp-allow")
    except UrlRefused as exc:
        raise ConfigError(flag, f"{mcp.code_interpreter_url!r} is refused: {exc}") from None


def _store_kind(url: str) -> str:
    kind = parse_redis_url(url).kind
    return "redis" if kind == "single" else f"redis ({kind})"


def accepted_keys(settings: Settings) -> tuple[str, ...]:
    """Every client key: `--api-key`s and the keys file's (auth is on when there is one)."""
    return settings.tenancy.accepted_keys()


def fleet_secrets(settings: Settings) -> tuple[bytes, ...]:
    """The operator's fleet secrets (groups.py `Sealing.secrets`)."""
    return settings.sealing.secrets()


def require_upstreams(settings: Settings, command: str) -> None:
    if not settings.fleet.upstreams:
        raise ConfigError("--upstream", f"`{command}` needs at least one upstream")


def describe(settings: Settings) -> Sequence[str]:
    """Lines for the start-up log: what runs, never a secret."""
    keys = accepted_keys(settings)
    embedded = "embedded (one instance; lost on exit)"
    return (
        f"upstreams: {', '.join(settings.fleet.upstreams) or '(none)'}",
        f"store: {_store_kind(settings.store.redis_url) if settings.store.redis_url else embedded}",
        f"auth: {f'{len(keys)} key(s)' if keys else 'OFF (no keys)'}",
        f"cache: {settings.cache.mode}",
        f"processes: {settings.server.workers}",
    )


def field_default(opt: Option) -> Any:
    """The default an option's field has (what `--help` shows)."""
    return getattr(getattr(Settings(), opt.group), opt.field)


def shown_default(opt: Option) -> str:
    """The default as people write it (`5`, not `5.0`; the option's own `shown` when it has
    one); "" for lists, switches and None. `--help` and docs/configuration.md both print it."""
    if opt.shown is not None:
        return opt.shown
    default = field_default(opt)
    if isinstance(default, bool) or not isinstance(default, (int, float, str)):
        return ""
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)
