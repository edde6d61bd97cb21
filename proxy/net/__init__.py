"""Socket and frame I/O: the lowest layer inside `proxy`, below everything that decides what
to do with the bytes it moves."""
