"""Herald's one configuration layer: every YAML section, the proxy's and the interceptors',
is read through these pieces, so every error names the YAML path of the bad key.

* `Node`: a mapping being validated by hand, which knows its path and refuses unknown keys;
* `build_config`: a mapping checked against a dataclass of settings (interceptors, routing
  actions, the pipeline);
* `ConfigError`: the one error type, listing every bad key of a document; `InvalidConfig` is
  what a settings dataclass raises to reject a value, turned into a `ConfigError` with the
  full path by `build_config`;
* `ErrorCollector`: where a loader records errors and carries on, so one check reports every
  mistake of a file (`herald check`), not only the first.

It is a package of its own, below `interceptors`, `proxy` and `pipeline` alike, and imports
nothing of Herald's: every product reads its YAML the same way without depending on another
product's code. `configuration.cache` is the one rule for the cache folder, for the same reason.
"""

from configuration.errors import ConfigError, ErrorCollector, InvalidConfig
from configuration.node import HostPort, Node, parse_host_port
from configuration.schema import build_config, read_yaml, yaml_key

__all__ = [
    "ConfigError",
    "ErrorCollector",
    "HostPort",
    "InvalidConfig",
    "Node",
    "build_config",
    "parse_host_port",
    "read_yaml",
    "yaml_key",
]
