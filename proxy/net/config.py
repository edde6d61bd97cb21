"""Addresses in the configuration and what goes wrong with them.

A configured address is a `HostPort` (`configuration`, the configuration layer every
package reads, the pipeline's `metrics_bind` included); what listens on it is configured in
`serving/config.py` (`listen`, `admin`).
"""

from __future__ import annotations


class ListenError(OSError):
    """A configured address cannot be listened on (busy, not local); the message starts with
    the YAML path of the key that names it."""
