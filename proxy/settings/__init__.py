"""Settings: one frozen object, in groups, built once at start from flags and the environment.

    options.py  the table: one row per option (flag, variable, help, validator, field)
    groups.py   the frozen groups (server, fleet, cache, jobs, ...) and `Settings`
    checks.py   the validators and `ConfigError`
    build.py    flags + environment -> `Settings`, and what one option means for another

May import: `proxy.core`, the standard library and third-party libraries (the fleet file's
reader, `settings/fleetfile.py`, counts as part of this room). `--redis-url` is read with the
parser the store opens it with, `proxy.core.storage.topology`.
"""

from proxy.settings.build import (
    accepted_keys,
    build_settings,
    describe,
    fleet_secrets,
    require_upstreams,
)
from proxy.settings.checks import (
    PLACEHOLDERS,
    ConfigError,
    check_port,
    check_positive,
    check_proxy_url,
    check_redis_url,
    load_keys_file,
    normalize_upstream,
)
from proxy.settings.groups import (
    FETCH_ALLOW_DEFAULT,
    CacheSettings,
    FetchSettings,
    FleetSettings,
    FlowSettings,
    JobSettings,
    LimitSettings,
    McpSettings,
    SealingSettings,
    ServerSettings,
    Settings,
    StoreSettings,
    StreamSettings,
    TenancySettings,
    Timeouts,
    ToleranceSettings,
    UpstreamSettings,
)

__all__ = [
    "FETCH_ALLOW_DEFAULT", "PLACEHOLDERS", "CacheSettings", "ConfigError", "FetchSettings",
    "FleetSettings", "FlowSettings", "JobSettings", "LimitSettings", "McpSettings",
    "SealingSettings", "ServerSettings", "Settings", "StoreSettings", "StreamSettings",
    "TenancySettings", "Timeouts", "ToleranceSettings", "UpstreamSettings", "accepted_keys",
    "build_settings", "check_port", "check_positive", "check_proxy_url", "check_redis_url",
    "describe", "fleet_secrets", "load_keys_file", "normalize_upstream", "require_upstreams",
]
