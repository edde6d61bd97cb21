"""The `herald` command: one command line above Herald's products (the proxy, the pipeline).

`herald.registry` names each subcommand and each section of the YAML file by the package that
provides it; nothing below this package imports it.
"""
