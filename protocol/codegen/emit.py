"""Turns the merged message model into straight-line Python modules.

For every distinct wire layout of every struct (versions whose layout is identical share one
function) a decoder and an encoder are written out field by field: consecutive fixed-width
fields become one precompiled ``struct`` call, the one-byte fast path of every unsigned varint
is inlined, and nothing walks a schema at run time. Output is deterministic: the same specs
always give byte-identical files.
"""

from __future__ import annotations

import textwrap
from typing import Any

from protocol.codegen.model import (
    EMPTY_LIST,
    FIXED_SIZES,
    ClassDef,
    ClassField,
    FieldLayout,
    Message,
    StructDefault,
    StructLayout,
    element_min_size,
)
from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION
from protocol.primitives import MAX_STRING_LENGTH

_FMT = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}
_PY_TYPES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "uint32": "int",
    "float64": "float",
    "bool": "bool",
    "uuid": "bytes",
    "string": "str",
    "bytes": "bytes",
    "records": "bytes | bytearray | memoryview",  # a slice of the buffer decoded
}
_STR_ARGS = '"utf-8", "surrogateescape"'
_WIDTH = 100


def _versions_text(versions: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for v in versions:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _struct_name(fmt: str) -> str:
    return fmt.replace("16s", "u").replace("?", "z")


def _py_literal(value: Any) -> str:
    if value is EMPTY_LIST:
        return "[]"
    if isinstance(value, StructDefault):
        return f"{value.name}()"
    if isinstance(value, bytes):
        return "ZERO_UUID" if len(value) == 16 and not any(value) else repr(value)
    return repr(value)


def _py_type(cf: ClassField) -> str:
    if cf.is_array:
        element = cf.struct_name or _PY_TYPES[cf.element_type]
        if "|" in element:
            element = f"({element})"
        t = f"list[{element}]"
    else:
        t = cf.struct_name or _PY_TYPES[cf.type]
    if cf.nullable_any or cf.default is None:
        t += " | None"
    return t


def _uses_missing(cf: ClassField) -> bool:
    return cf.default is EMPTY_LIST or isinstance(cf.default, StructDefault)


def _signature(name: str, params: str, returns: str) -> list[str]:
    """A module-level function's first lines, wrapped as ruff wants them past 100 columns."""
    line = f"def {name}({params}) -> {returns}:"
    if len(line) <= 100:
        return [line]
    return [f"def {name}(", f"    {params}", f") -> {returns}:"]


class ModuleEmitter:
    """Writes the module of one message (its classes, codecs and version tables)."""

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.unpackers: set[str] = set()
        self.packers: set[str] = set()
        self.array_codes: set[str] = set()
        self.primitive_imports: set[str] = set()
        self.defaults_needed: set[str] = set()
        self.decoders: dict[tuple[Any, ...], str] = {}
        self.encoders: dict[tuple[Any, ...], str] = {}
        self.functions: list[list[str]] = []
        self.uses_missing = False

    # ----------------------------------------------------------------- module

    def render(self) -> str:
        msg = self.msg
        dec_table = {}
        enc_table = {}
        for v in msg.versions:
            layout = msg.layout(v)
            dec_table[v] = self.decoder(layout, v)
            enc_table[v] = self.encoder(layout, v)
        classes = [self.render_class(msg.classes[name]) for name in msg.classes]
        out: list[str] = []
        out += self.render_header()
        out += self.render_constants()
        for cls in classes:
            out += ["", ""] + cls
        for fn in self.functions:
            out += ["", ""] + fn
        out += ["", ""]
        out.append("_DECODERS = {")
        out += [f"    {v}: {name}," for v, name in dec_table.items()]
        out.append("}")
        out.append("_ENCODERS = {")
        out += [f"    {v}: {name}," for v, name in enc_table.items()]
        out.append("}")
        return "\n".join(out) + "\n"

    def render_header(self) -> list[str]:
        msg = self.msg
        legacy_only = [v for v in msg.versions if msg.spec_for(v) is not msg.newest]
        source = f"kafka-clients {KAFKA_VERSION}"
        if legacy_only:
            source += f" ({KAFKA_LEGACY_VERSION} for versions {_versions_text(legacy_only)})"
        flexible = (
            f"flexible from {msg.flexible_min_version}"
            if msg.flexible_min_version is not None
            else "never flexible"
        )
        paragraphs = [
            f"{msg.name}: versions {_versions_text(msg.versions)}, {flexible}.",
            f"Generated by ``python -m protocol.codegen`` from the message specs of {source}. "
            "Do not edit by hand: change the generator and regenerate.",
        ]
        lines = []
        for k, paragraph in enumerate(paragraphs):
            lines += [""] if k else []
            lines += textwrap.wrap(paragraph, _WIDTH - 3)
        lines[0] = '"""' + lines[0]
        lines.append('"""')
        imports = ["from __future__ import annotations", ""]
        std = []
        if self.unpackers or self.packers:
            std.append("from struct import Struct")
        std.append("from struct import error as StructError")
        if self.uses_missing:
            std.append("from typing import Any")
        imports += std + ([""] if std else [])
        imports.append("from protocol.errors import CodecError")
        names = sorted(
            self.primitive_imports | {"Buffer"},
            key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n),
        )
        imports.append("from protocol.primitives import (")
        imports += [f"    {n}," for n in names]
        imports.append(")")
        return lines + [""] + imports

    def render_constants(self) -> list[str]:
        msg = self.msg
        out = [""]
        if msg.api_key is not None:
            out.append(f"API_KEY = {msg.api_key}")
        out.append(f"MIN_VERSION = {msg.min_version}")
        out.append(f"MAX_VERSION = {msg.max_version}")
        out.append(f"FLEXIBLE_MIN_VERSION = {msg.flexible_min_version}")
        out.append("")
        out.append("_new = object.__new__")
        if self.uses_missing:
            out.append("_MISSING: Any = object()  # marks an argument left at its default")
        for fmt in sorted(self.unpackers | self.packers):
            out.append(f'_S_{_struct_name(fmt)} = Struct(">{fmt}")')
        for fmt in sorted(self.unpackers):
            out.append(f"_u_{_struct_name(fmt)} = _S_{_struct_name(fmt)}.unpack_from")
        for fmt in sorted(self.packers):
            out.append(f"_p_{_struct_name(fmt)} = _S_{_struct_name(fmt)}.pack")
        for code in sorted(self.array_codes):
            out.append(f'_A_{_struct_name(code)} = ARRAY_STRUCTS["{code}"]')
        return out

    # ----------------------------------------------------------------- classes

    def render_class(self, cls: ClassDef) -> list[str]:
        msg = self.msg
        top = cls.name == msg.name
        slots = [f.py_name for f in cls.fields] + ["unknown_tagged_fields"]
        out = [f"class {cls.name}:"]
        if top:
            summary = f"The {msg.name} message (all versions)."
        else:
            summary = f"A struct nested in {msg.name}."
        doc = [summary, "", "Attributes:"]
        for f in cls.fields:
            about = f.about.strip() or f.spec_name
            doc += textwrap.wrap(
                f"{f.py_name}: {about}",
                _WIDTH - 8,
                initial_indent="    ",
                subsequent_indent="        ",
            )
        doc += textwrap.wrap(
            "unknown_tagged_fields: tagged fields this version of Herald does not know, "
            "by tag, kept as raw bytes and written back unchanged (None when there are none).",
            _WIDTH - 8,
            initial_indent="    ",
            subsequent_indent="        ",
        )
        out.append('    """' + doc[0])
        out += [("    " + d) if d else "" for d in doc[1:]]
        out.append('    """')
        out.append("")
        if top:
            if msg.api_key is not None:
                out.append(f"    API_KEY = {msg.api_key}")
            out.append(f"    MIN_VERSION = {msg.min_version}")
            out.append(f"    MAX_VERSION = {msg.max_version}")
            out.append(f"    FLEXIBLE_MIN_VERSION = {msg.flexible_min_version}")
            out.append("")
        slot_line = "    __slots__ = (" + ", ".join(f'"{s}"' for s in slots) + ")"
        if len(slot_line) <= _WIDTH:
            out.append(slot_line)
        else:
            out.append("    __slots__ = (")
            out += [f'        "{s}",' for s in slots]
            out.append("    )")
        out.append("    __hash__ = None  # type: ignore[assignment]  # mutable")
        out.append("")
        # __init__
        out.append("    def __init__(")
        out.append("        self,")
        out.append("        *,")
        for f in cls.fields:
            if _uses_missing(f):
                self.uses_missing = True
                out.append(f"        {f.py_name}: {_py_type(f)} = _MISSING,")
            else:
                if isinstance(f.default, bytes) and len(f.default) == 16:
                    self.primitive_imports.add("ZERO_UUID")
                out.append(f"        {f.py_name}: {_py_type(f)} = {_py_literal(f.default)},")
        out.append("        unknown_tagged_fields: dict[int, bytes] | None = None,")
        out.append("    ) -> None:")
        for f in cls.fields:
            if _uses_missing(f):
                out.append(f"        if {f.py_name} is _MISSING:")
                out.append(f"            {f.py_name} = {_py_literal(f.default)}")
                out.append(f"        self.{f.py_name} = {f.py_name}")
            else:
                out.append(f"        self.{f.py_name} = {f.py_name}")
        out.append("        self.unknown_tagged_fields = unknown_tagged_fields")
        out.append("")
        # __eq__
        conds = [f"self.{f.py_name} == other.{f.py_name}" for f in cls.fields]
        conds.append(
            "(self.unknown_tagged_fields or None) == (other.unknown_tagged_fields or None)"
        )
        out.append("    def __eq__(self, other: object) -> bool:")
        out.append(f"        if type(other) is not {cls.name}:")
        out.append("            return NotImplemented")
        out.append("        return (")
        for k, c in enumerate(conds):
            out.append("            " + ("and " if k else "") + c)
        out.append("        )")
        out.append("")
        # __repr__
        out.append("    def __repr__(self) -> str:")
        out.append(
            '        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)'
        )
        out.append(f'        return f"{cls.name}({{fields}})"')
        if top:
            out += self.render_codec_methods(cls)
        return out

    def render_codec_methods(self, cls: ClassDef) -> list[str]:
        name = cls.name
        return [
            "",
            "    @classmethod",
            f"    def decode(cls, buf: Buffer, version: int, offset: int = 0) -> {name}:",
            '        """Decode a whole body: ``buf[offset:]`` must hold exactly one message.',
            "",
            "        Raises CodecError on truncation, trailing bytes, an unsupported version or",
            "        any inconsistency. ``records`` fields are slices of ``buf`` (zero-copy",
            "        ``memoryview`` slices when ``buf`` is a memoryview).",
            '        """',
            "        msg, end = cls.decode_from(buf, version, offset)",
            "        if end != len(buf):",
            "            raise CodecError(",
            f'                f"{name} v{{version}}: {{len(buf) - end}} trailing bytes"',
            "            )",
            "        return msg",
            "",
            "    @classmethod",
            "    def decode_from(",
            "        cls, buf: Buffer, version: int, offset: int = 0",
            f"    ) -> tuple[{name}, int]:",
            '        """Decode one message starting at ``offset``; return it and where it ends."""',
            "        decoder = _DECODERS.get(version)",
            "        if decoder is None:",
            f'            raise CodecError(f"{name}: unsupported version {{version!r}}")',
            "        try:",
            "            msg, end = decoder(buf, offset)",
            "        except (IndexError, StructError) as e:",
            f'            raise CodecError(f"{name} v{{version}}: truncated ({{e}})") from None',
            "        if end > len(buf):",
            f'            raise CodecError(f"{name} v{{version}}: truncated")',
            "        return msg, end",
            "",
            "    def encode(self, version: int) -> bytes:",
            '        """The body of this message in ``version`` (CodecError if it cannot be)."""',
            "        out = bytearray()",
            "        self.encode_into(out, version)",
            "        return bytes(out)",
            "",
            "    def encode_into(self, out: bytearray, version: int) -> None:",
            '        """Append the body to ``out``; on error ``out`` is left as it was."""',
            "        encoder = _ENCODERS.get(version)",
            "        if encoder is None:",
            f'            raise CodecError(f"{name}: unsupported version {{version!r}}")',
            "        start = len(out)",
            "        try:",
            "            encoder(self, out)",
            "        except (StructError, UnicodeEncodeError, OverflowError) as e:",
            "            del out[start:]",
            f'            raise CodecError(f"{name} v{{version}}: {{e}}") from None',
            "        except CodecError:",
            "            del out[start:]",
            "            raise",
        ]

    # ----------------------------------------------------------------- decoders

    def _unpack(self, fmt: str) -> str:
        self.unpackers.add(fmt)
        return f"_u_{_struct_name(fmt)}"

    def _pack(self, fmt: str) -> str:
        self.packers.add(fmt)
        return f"_p_{_struct_name(fmt)}"

    def _array(self, code: str, count: str) -> str:
        self.array_codes.add(code)
        self.primitive_imports.add("ARRAY_STRUCTS")
        self.primitive_imports.add("SMALL_ARRAY")
        self.primitive_imports.add("array_struct")
        return (
            f'(_A_{_struct_name(code)}[{count}] if {count} < SMALL_ARRAY '
            f'else array_struct("{code}", {count}))'
        )

    def _read_uvarint(self, var: str) -> list[str]:
        self.primitive_imports.add("read_unsigned_varint")
        return [
            f"{var} = buf[pos]",
            f"if {var} < 128:",
            "    pos += 1",
            "else:",
            f"    {var}, pos = read_unsigned_varint(buf, pos)",
        ]

    def decoder(self, layout: StructLayout, version: int) -> str:
        sig = layout.signature()
        if sig in self.decoders:
            return self.decoders[sig]
        name = f"_decode_{layout.name}_v{version}"
        self.decoders[sig] = name
        body: list[str] = [f"o = _new({layout.name})"]
        body += self._read_fields(layout, layout.wire_fields, version)
        if layout.flexible:
            body += self._read_tagged(layout, version)
        else:
            body.append("o.unknown_tagged_fields = None")
        for cf, _ignorable in layout.absent:
            body.append(f"o.{cf.py_name} = {self._default_expr(cf)}")
        body.append("return o, pos")
        head = _signature(name, "buf: Buffer, pos: int", f"tuple[{layout.name}, int]")
        self.functions.append(head + ["    " + b if b else b for b in body])
        return name

    def _default_expr(self, cf: ClassField) -> str:
        if isinstance(cf.default, bytes) and len(cf.default) == 16:
            self.primitive_imports.add("ZERO_UUID")
            return "ZERO_UUID"
        return _py_literal(cf.default)

    def _read_fields(
        self, layout: StructLayout, fields: list[FieldLayout], version: int
    ) -> list[str]:
        out: list[str] = []
        run: list[FieldLayout] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(_FMT[f.kind] for f in run)
            size = sum(FIXED_SIZES[f.kind] for f in run)
            targets = ", ".join(f"o.{f.cf.py_name}" for f in run)
            if len(run) == 1:
                out.append(f"{targets} = {self._unpack(fmt)}(buf, pos)[0]")
            else:
                out.append(f"{targets} = {self._unpack(fmt)}(buf, pos)")
            out.append(f"pos += {size}")
            run.clear()

        for f in fields:
            if f.kind in FIXED_SIZES:
                run.append(f)
                continue
            flush()
            out += self._read_value(layout, f, f"o.{f.cf.py_name}", version)
        flush()
        return out

    def _null(self, layout: StructLayout, f: FieldLayout, target: str) -> list[str]:
        if f.nullable:
            return [f"{target} = None"]
        return [f'raise CodecError("{layout.name}.{f.cf.py_name}: null in a non-nullable field")']

    def _read_value(
        self, layout: StructLayout, f: FieldLayout, target: str, version: int
    ) -> list[str]:
        kind = f.kind
        if kind in FIXED_SIZES:
            fmt = _FMT[kind]
            return [f"{target} = {self._unpack(fmt)}(buf, pos)[0]", f"pos += {FIXED_SIZES[kind]}"]
        if kind == "struct":
            assert f.struct is not None
            fn = self.decoder(f.struct, version)
            if f.nullable:  # an int8 marker first: negative for null, 1 for present
                return ["pos += 1", "if buf[pos - 1] >= 0x80:", f"    {target} = None",
                        "else:", f"    {target}, pos = {fn}(buf, pos)"]
            return [f"{target}, pos = {fn}(buf, pos)"]
        if kind in ("string", "bytes", "records"):
            return self._read_blob(layout, f, kind, target)
        assert kind == "array"
        return self._read_array(layout, f, target, version)

    def _read_blob(
        self, layout: StructLayout, f: FieldLayout, kind: str, target: str
    ) -> list[str]:
        if kind == "string":
            value = f"str(buf[pos:e], {_STR_ARGS})"
        elif kind == "bytes":
            value = "bytes(buf[pos:e])"
        else:
            value = "buf[pos:e]"
        out: list[str] = []
        if f.compact:
            out += self._read_uvarint("n")
            out.append("if n:")
            body = []
            if kind == "string":
                body += [
                    f"if n > {MAX_STRING_LENGTH + 1}:",
                    f'    raise CodecError("{layout.name}.{f.cf.py_name}: string too long")',
                ]
            body += ["e = pos + n - 1", f"{target} = {value}", "pos = e"]
        else:
            fmt = "h" if kind == "string" else "i"
            size = 2 if kind == "string" else 4
            out.append(f"n = {self._unpack(fmt)}(buf, pos)[0]")
            out.append(f"pos += {size}")
            out.append("if n >= 0:")
            body = ["e = pos + n", f"{target} = {value}", "pos = e"]
        out += ["    " + b for b in body]
        out.append("else:")
        out += ["    " + b for b in self._null(layout, f, target)]
        return out

    def _read_array(
        self, layout: StructLayout, f: FieldLayout, target: str, version: int
    ) -> list[str]:
        out: list[str] = []
        if f.compact:
            out += self._read_uvarint("c")
            out.append("c -= 1")
        else:
            out.append(f"c = {self._unpack('i')}(buf, pos)[0]")
            out.append("pos += 4")
        out.append("if c >= 0:")
        min_size = element_min_size(f)
        scaled = "c" if min_size == 1 else f"c * {min_size}"
        body = [
            f"if {scaled} > len(buf) - pos:",
            f'    raise CodecError(f"{layout.name}.{f.cf.py_name}: array count {{c}} too large")',
        ]
        element = f.element
        assert element is not None
        # Named for the field: one function reads several arrays, and a type checker gives a
        # name the type of its first use.
        a, x = f"a_{f.cf.py_name}", f"x_{f.cf.py_name}"
        if element in FIXED_SIZES:
            code = _FMT[element]
            body.append(f"s = {self._array(code, 'c')}")
            body.append(f"{target} = list(s.unpack_from(buf, pos))")
            body.append(f"pos += c * {FIXED_SIZES[element]}" if FIXED_SIZES[element] > 1 else
                        "pos += c")
        elif element == "struct":
            assert f.struct is not None
            fn = self.decoder(f.struct, version)
            body += [
                f"{a} = []",
                "for _ in range(c):",
                f"    {x}, pos = {fn}(buf, pos)",
                f"    {a}.append({x})",
                f"{target} = {a}",
            ]
        else:
            elem = FieldLayout(f.cf, element, None, None, False, None, f.compact)
            body += [f"{a} = []", "for _ in range(c):"]
            body += ["    " + b for b in self._read_blob(layout, elem, element, x)]
            body += [f"    {a}.append({x})", f"{target} = {a}"]
        out += ["    " + b for b in body]
        out.append("else:")
        out += ["    " + b for b in self._null(layout, f, target)]
        return out

    def _read_tagged(self, layout: StructLayout, version: int) -> list[str]:
        out: list[str] = []
        tagged = layout.tagged_fields
        for f in tagged:
            out.append(f"o.{f.cf.py_name} = {self._default_expr(f.cf)}")
        out.append("o.unknown_tagged_fields = None")
        out += self._read_uvarint("tn")
        out.append("if tn:")
        body = [
            "if tn * 2 > len(buf) - pos:",
            f'    raise CodecError("{layout.name}: too many tagged fields")',
            "tl = -1",
            "for _ in range(tn):",
        ]
        loop = self._read_uvarint("tg") + self._read_uvarint("ts")
        loop += [
            "if tg <= tl:",
            f'    raise CodecError("{layout.name}: tagged fields out of order")',
            "tl = tg",
            "te = pos + ts",
            "if te > len(buf):",
            f'    raise CodecError("{layout.name}: truncated tagged field")',
        ]
        unknown = [
            "u = o.unknown_tagged_fields",
            "if u is None:",
            "    u = o.unknown_tagged_fields = {}",
            "u[tg] = bytes(buf[pos:te])",
            "pos = te",
        ]
        # tags of this struct's fields in other versions are refused, as Kafka does
        other_tags = [t for t in layout.class_tags if t not in {f.tag for f in tagged}]
        if tagged or other_tags:
            for k, f in enumerate(tagged):
                loop.append(f"{'if' if k == 0 else 'elif'} tg == {f.tag}:")
                loop += ["    " + b for b in self._read_value(layout, f, f"o.{f.cf.py_name}",
                                                             version)]
            if other_tags:
                cond = " or ".join(f"tg == {t}" for t in other_tags)
                loop.append(f"{'elif' if tagged else 'if'} {cond}:")
                loop.append(
                    f'    raise CodecError(f"{layout.name}: tag {{tg}} is not valid in this '
                    'version")'
                )
            loop.append("else:")
            loop += ["    " + b for b in unknown]
            loop += [
                "if pos != te:",
                f'    raise CodecError("{layout.name}: tagged field size mismatch")',
            ]
        else:
            loop += unknown
        body += ["    " + b for b in loop]
        out += ["    " + b for b in body]
        return out

    # ----------------------------------------------------------------- encoders

    def _write_uvarint_plus_one(self, var: str, out: str) -> list[str]:
        self.primitive_imports.add("write_unsigned_varint")
        return [
            f"if {var} < 127:",
            f"    {out}.append({var} + 1)",
            "else:",
            f"    write_unsigned_varint({out}, {var} + 1)",
        ]

    def encoder(self, layout: StructLayout, version: int) -> str:
        sig = layout.signature()
        if sig in self.encoders:
            return self.encoders[sig]
        name = f"_encode_{layout.name}_v{version}"
        self.encoders[sig] = name
        versions = [
            v for v in self.msg.versions if self._has_layout(v, sig)
        ]
        body: list[str] = []
        for cf, ignorable in layout.absent:
            if ignorable:
                continue
            cond = self._non_default(cf, f"o.{cf.py_name}")
            body += [
                f"if {cond}:",
                f'    raise CodecError("{layout.name}.{cf.py_name} cannot be set in versions '
                f'{_versions_text(versions)}")',
            ]
        body += self._write_fields(layout, layout.wire_fields, version, "out")
        if layout.flexible:
            body += self._write_tagged(layout, version)
        if not body:
            body.append("pass")
        head = _signature(name, f"o: {layout.name}, out: bytearray", "None")
        self.functions.append(head + ["    " + b if b else b for b in body])
        return name

    def _has_layout(self, version: int, sig: tuple[Any, ...]) -> bool:
        found = False

        def visit(layout: StructLayout) -> None:
            nonlocal found
            if found:
                return
            if layout.signature() == sig:
                found = True
                return
            for f in layout.fields:
                if f.struct is not None:
                    visit(f.struct)

        visit(self.msg.layout(version))
        return found

    def _non_default(self, cf: ClassField, expr: str) -> str:
        d = cf.default
        if d is None and cf.struct_name is not None and not cf.is_array:
            self.defaults_needed.add(cf.struct_name)
            return f"{expr} is not None and {expr} != _DEFAULT_{cf.struct_name}"
        if d is None:
            return f"{expr} is not None"
        if isinstance(d, StructDefault):
            self.defaults_needed.add(d.name)
            return f"{expr} != {d.name}()"
        if d is EMPTY_LIST:
            return f"{expr} != []"
        if isinstance(d, bool):
            return expr if d is False else f"not {expr}"
        if isinstance(d, bytes) and len(d) == 16:
            self.primitive_imports.add("ZERO_UUID")
            return f"{expr} != ZERO_UUID"
        return f"{expr} != {d!r}"

    def _write_fields(
        self, layout: StructLayout, fields: list[FieldLayout], version: int, out_var: str
    ) -> list[str]:
        out: list[str] = []
        run: list[FieldLayout] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(_FMT[f.kind] for f in run)
            for f in run:
                if f.kind == "uuid":
                    out.extend([
                        f"if len(o.{f.cf.py_name}) != 16:",
                        f'    raise CodecError("{layout.name}.{f.cf.py_name}: uuid must be 16'
                        ' bytes")',
                    ])
            args = ", ".join(f"o.{f.cf.py_name}" for f in run)
            out.append(f"{out_var} += {self._pack(fmt)}({args})")
            run.clear()

        for f in fields:
            if f.kind in FIXED_SIZES:
                run.append(f)
                continue
            flush()
            out += self._write_value(layout, f, f"o.{f.cf.py_name}", version, out_var)
        flush()
        return out

    def _write_null(self, layout: StructLayout, f: FieldLayout, out_var: str) -> list[str]:
        if not f.nullable:
            return [
                f'raise CodecError("{layout.name}.{f.cf.py_name}: None in a non-nullable field")'
            ]
        if f.compact:
            return [f"{out_var}.append(0)"]
        if f.kind == "string":
            return [f'{out_var} += b"\\xff\\xff"']
        return [f'{out_var} += b"\\xff\\xff\\xff\\xff"']

    def _write_value(
        self, layout: StructLayout, f: FieldLayout, expr: str, version: int, out_var: str
    ) -> list[str]:
        kind = f.kind
        if kind in FIXED_SIZES:
            out = []
            if kind == "uuid":
                out += [
                    f"if len({expr}) != 16:",
                    f'    raise CodecError("{layout.name}.{f.cf.py_name}: uuid must be 16'
                    ' bytes")',
                ]
            out.append(f"{out_var} += {self._pack(_FMT[kind])}({expr})")
            return out
        v = f"v_{f.cf.py_name}"  # named for the field, as the decoders' arrays are
        if kind == "struct":
            assert f.struct is not None
            fn = self.encoder(f.struct, version)
            if f.nullable:
                return [f"{v} = {expr}", f"if {v} is None:", f"    {out_var}.append(0xFF)",
                        "else:", f"    {out_var}.append(1)", f"    {fn}({v}, {out_var})"]
            return [f"{fn}({expr}, {out_var})"]
        out = [f"{v} = {expr}", f"if {v} is None:"]
        out += ["    " + b for b in self._write_null(layout, f, out_var)]
        if kind in ("string", "bytes", "records"):
            body = self._write_blob(layout, f, kind, v, out_var)
        else:
            body = self._write_array(layout, f, version, out_var, v)
        if f.nullable:
            out.append("else:")
            out += ["    " + b for b in body]
        else:
            out += body
        return out

    def _write_blob(
        self, layout: StructLayout, f: FieldLayout, kind: str, var: str, out_var: str
    ) -> list[str]:
        if kind == "string":
            out = [
                f"b = {var}.encode({_STR_ARGS})",
                "n = len(b)",
                f"if n > {MAX_STRING_LENGTH}:",
                f'    raise CodecError("{layout.name}.{f.cf.py_name}: string too long")',
            ]
            data = "b"
        else:
            out = [f"n = len({var})"]
            data = var
        if f.compact:
            out += self._write_uvarint_plus_one("n", out_var)
        else:
            out.append(f"{out_var} += {self._pack('h' if kind == 'string' else 'i')}(n)")
        out.append(f"{out_var} += {data}")
        return out

    def _write_array(
        self, layout: StructLayout, f: FieldLayout, version: int, out_var: str, v: str
    ) -> list[str]:
        x = f"x_{f.cf.py_name}"
        out = [f"n = len({v})"]
        if f.compact:
            out += self._write_uvarint_plus_one("n", out_var)
        else:
            out.append(f"{out_var} += {self._pack('i')}(n)")
        element = f.element
        assert element is not None
        if element in FIXED_SIZES:
            if element == "uuid":
                out += [
                    f"for {x} in {v}:",
                    f"    if len({x}) != 16:",
                    f'        raise CodecError("{layout.name}.{f.cf.py_name}: uuid must be 16'
                    ' bytes")',
                ]
            out.append(f"s = {self._array(_FMT[element], 'n')}")
            out.append(f"{out_var} += s.pack(*{v})")
        elif element == "struct":
            assert f.struct is not None
            fn = self.encoder(f.struct, version)
            out += [f"for {x} in {v}:", f"    {fn}({x}, {out_var})"]
        else:
            elem = FieldLayout(f.cf, element, None, None, False, None, f.compact)
            out += [
                f"for {x} in {v}:",
                f"    if {x} is None:",
                f'        raise CodecError("{layout.name}.{f.cf.py_name}: None element")',
            ]
            out += ["    " + b for b in self._write_blob(layout, elem, element, x, out_var)]
        return out

    def _write_tagged(self, layout: StructLayout, version: int) -> list[str]:
        tagged = layout.tagged_fields
        all_tags = layout.class_tags
        out = ["u = o.unknown_tagged_fields"]
        if not tagged and not all_tags:
            self.primitive_imports.add("write_tagged_fields")
            out += [
                "if u:",
                "    write_tagged_fields(out, u)",
                "else:",
                "    out.append(0)",
            ]
            return out
        self.primitive_imports.add("merge_tagged_fields")
        self.primitive_imports.add("write_tag_list")
        out.append("tf: list[tuple[int, bytes | bytearray]] = []")
        for f in tagged:
            cond = self._non_default(f.cf, f"o.{f.cf.py_name}")
            out.append(f"if {cond}:")
            body = ["tb = bytearray()"]
            body += self._write_value(layout, f, f"o.{f.cf.py_name}", version, "tb")
            body.append(f"tf.append(({f.tag}, tb))")
            out += ["    " + b for b in body]
        reserved = ", ".join(str(t) for t in all_tags) + ("," if len(all_tags) == 1 else "")
        out += [
            "if u:",
            f"    tf = merge_tagged_fields(tf, u, ({reserved}))",
            "write_tag_list(out, tf)",
        ]
        return out


def _wrap_long_lines(text: str) -> str:
    """Reflow the few generated statements that come out longer than the line limit."""
    out = []
    for line in text.split("\n"):
        if len(line) <= _WIDTH:
            out.append(line)
            continue
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        inner = indent + "    "
        if stripped.startswith(("raise CodecError(\"", "raise CodecError(f\"")):
            f = "f" if stripped.startswith("raise CodecError(f") else ""
            suffix = " from None" if stripped.endswith(" from None") else ""
            message = stripped[len("raise CodecError(") + len(f) + 1 : -2 - len(suffix)]
            pieces = textwrap.wrap(
                message,
                _WIDTH - len(inner) - 3,
                drop_whitespace=False,
                break_long_words=False,
            )
            out.append(indent + "raise CodecError(")
            out += [f'{inner}{f if "{" in p else ""}"{p}"' for p in pieces]
            out.append(indent + ")" + suffix)
        elif " = _u_" in stripped and stripped.startswith("o."):
            targets, call = stripped.split(" = ", 1)
            out.append(indent + "(")
            out += [f"{inner}{t}," for t in targets.split(", ")]
            out.append(f"{indent}) = {call}")
        elif " += _p_" in stripped and stripped.endswith(")"):
            head, args = stripped.split("(", 1)
            out.append(f"{indent}{head}(")
            out += [f"{inner}{a}," for a in args[:-1].split(", ")]
            out.append(indent + ")")
        elif stripped.startswith(("self.", "and self.")) and " == other." in stripped:
            left, right = stripped.split(" == ", 1)
            out.append(f"{indent}{left}")
            out.append(f"{indent}== {right}")
        else:
            out.append(line)
    return "\n".join(out)


def render_message(msg: Message) -> str:
    emitter = ModuleEmitter(msg)
    text = _wrap_long_lines(emitter.render())
    if emitter.defaults_needed:
        extra = "\n".join(
            f"_DEFAULT_{name} = {name}()  # compared against, never handed out"
            for name in sorted(emitter.defaults_needed)
        )
        marker = "\n\n_DECODERS = {"
        text = text.replace(marker, "\n\n" + extra + "\n" + marker, 1)
    return text
