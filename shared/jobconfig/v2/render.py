"""``<% %>`` rendering of a protocol v2 job, as OpenPAI's two programs did it, and the secrets mask.

**At submit** (rest-server ``middlewares/v2/protocol.js`` ``render``, mustache.js 2.3.2's parser with the
tags ``<%`` ``%>``): each role's command is the default deployment's ``preCommands`` for it, its
``commands`` and the ``postCommands``, each trimmed, joined with ``\\n``; rendered with ``$parameters``
and the role's ``$script``, ``$output``, ``$data`` prerequisites; the result trimmed. A name whose value
is not null is written as JavaScript's ``+`` writes it (:func:`~shared.jobconfig.v2.jsvalues.js_string`);
an unknown or null one is written back as ``<% name %>`` (``[n]`` as ``.n``), so ``<% $secrets.x %>``
waits for the container. Every other mustache token (``<%& %>``, ``<%{ }%>``, sections with their
content, comments, partials, ``<%= =%>``) is dropped; a line holding only such tags and blanks loses
its blanks and newline (mustache's "standalone" rule). Registry credentials (each value of a
``dockerimage``'s ``auth``) are rendered with ``$secrets`` alone.

**In the container** (openpai-runtime ``init.d/user_command_renderer.py``: pystache over the whole
command with ``$secrets``): :func:`render_secrets`. With no ``secrets`` the command is left as it is;
with some, every name becomes its secret's value or, unknown, the empty string, as the runtime did.
paiq does **not** HTML-escape the value (pystache turned ``p&ss`` into ``p&amp;ss``): a deliberate
difference, since a password must reach the command as written.

The secrets mask (:func:`masked`) works on the parsed document: ``secrets`` becomes ``"******"``, the
text OpenPAI's GET config showed, whatever style the body wrote it in (OpenPAI's regex over the text
missed a quoted ``"secrets":`` key and JSON bodies, and stored their secrets).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.jobconfig.v2.jsvalues import js_string

MASK = "******"
_WHITE = re.compile(r"\s*")
_TAG_TYPES = "#^/>{&=!"


class RenderError(Exception):
    """A command mustache could not parse (OpenPAI answered 500): the parser's words."""


@dataclass(frozen=True)
class Token:
    kind: str  # "text", "name", or the mustache tag type ("#", "^", "/", "&", "!", ">", "=")
    value: str
    nested: bool = False  # inside a section: OpenPAI's loop never saw it


def _tag_patterns(opening: str, closing: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    return (re.compile(re.escape(opening) + r"\s*"), re.compile(r"\s*" + re.escape(closing)),
            re.compile(r"\s*" + re.escape("}" + closing)))


class _Parser:
    """mustache.js 2.3.2's ``parseTemplate``, as a scanner over the template."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.pos = 0
        self.out: list[Token | None] = []
        self.spaces: list[int] = []  # the blanks of the current line, by index in ``out``
        self.has_tag = self.non_space = False
        self.sections: list[str] = []
        self.opening, self.closing, self.curly = _tag_patterns("<%", "%>")

    def run(self) -> list[Token]:
        while self.pos < len(self.template):
            found = self.opening.search(self.template, self.pos)
            self.text(self.template[self.pos:found.start() if found else len(self.template)])
            if found is None:
                break
            start = found.start()
            self.pos = found.end()
            self.has_tag = True
            self.tag(start)
        if self.sections:
            raise RenderError(f'Unclosed section "{self.sections[-1]}" at {self.pos}')
        return [t for t in self.out if t is not None]

    def text(self, text: str) -> None:
        for ch in text:
            if ch.isspace():
                self.spaces.append(len(self.out))
            else:
                self.non_space = True
            self.out.append(Token("text", ch, nested=bool(self.sections)))
            if ch == "\n":  # mustache's stripSpace: a line of tags and blanks only loses its blanks
                if self.has_tag and not self.non_space:
                    for i in self.spaces:
                        self.out[i] = None
                self.spaces = []
                self.has_tag = self.non_space = False

    def until(self, pattern: re.Pattern[str]) -> str:
        """The text up to ``pattern`` (all of it when absent), the position left at the match."""
        found = pattern.search(self.template, self.pos)
        end = found.start() if found else len(self.template)
        value, self.pos = self.template[self.pos:end], end
        return value

    def tag(self, start: int) -> None:
        template = self.template
        kind = template[self.pos] if self.pos < len(template) and template[self.pos] in _TAG_TYPES else "name"
        self.pos += kind != "name"
        self.pos = _WHITE.match(template, self.pos).end()  # type: ignore[union-attr]
        if kind == "=":
            value = self.until(_EQUALS)
            self.pos = _EQUALS.match(template, self.pos).end() if self.pos < len(template) else self.pos  # type: ignore[union-attr]
            self.until(self.closing)
        elif kind == "{":
            value = self.until(self.curly)
            brace = _BRACE.match(template, self.pos)
            self.pos = brace.end() if brace else self.pos
            self.until(self.closing)
            kind = "&"
        else:
            value = self.until(self.closing)
        matched = self.closing.match(template, self.pos)
        if matched is None:
            raise RenderError(f"Unclosed tag at {self.pos}")
        self.pos = matched.end()
        self.out.append(Token(kind, value, nested=bool(self.sections)))
        self.mark(kind, value, start)

    def mark(self, kind: str, value: str, start: int) -> None:
        if kind in "#^":
            self.sections.append(value)
        elif kind == "/":
            if not self.sections:
                raise RenderError(f'Unopened section "{value}" at {start}')
            if self.sections.pop() != value:
                raise RenderError(f'Unclosed section "{value}" at {start}')
        elif kind in ("name", "&"):
            self.non_space = True
        elif kind == "=":
            parts = value.split()
            if len(parts) != 2:
                raise RenderError(f"Invalid tags: {value}")
            self.opening, self.closing, self.curly = _tag_patterns(parts[0], parts[1])


_EQUALS = re.compile(r"\s*=")
_BRACE = re.compile(r"\s*\}")


def tokens(template: str) -> list[Token]:
    """mustache.js 2.3.2's ``parseTemplate`` with the tags ``<%`` ``%>``: the tokens (text one character
    each), standalone lines stripped; raises :class:`RenderError` with mustache's message."""
    return _Parser(template).run()


def lookup(view: Mapping[str, Any], name: str) -> Any:
    """mustache's ``Context.lookup`` of a dotted name in a plain view: dicts by key, lists by index
    (and ``length``), strings' ``length``; None when any step is missing."""
    if name == ".":
        return dict(view)
    value: Any = view
    for part in name.split(".") if "." in name[1:] else [name]:
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list | str) and part == "length":
            value = len(value)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
        if value is None:
            return None
    return value


_INDEX = re.compile(r"\[(\d+)\]")


def render(template: str, view: Mapping[str, Any], at_most: int | None = None) -> str:
    """OpenPAI's ``render``: known names written, unknown ones written back, other tokens dropped;
    the result trimmed (JavaScript's ``trim``). Past ``at_most`` characters it stops (a parameter
    written a thousand times must not grow a command without bound): :class:`RenderError`."""
    out: list[str] = []
    size = 0
    for token in tokens(template):
        if token.nested or token.kind not in ("text", "name"):
            continue
        if token.kind == "text":
            piece = token.value
        else:
            name = _INDEX.sub(r".\1", token.value)
            value = lookup(view, name)
            piece = js_string(value) if value is not None else f"<% {name} %>"
        size += len(piece)
        if at_most is not None and size > at_most:
            raise RenderError(f"grows past {at_most:,} characters once its parameters are written in")
        out.append(piece)
    return js_trim("".join(out))


def js_trim(text: str) -> str:
    """JavaScript's ``String.prototype.trim`` (Python's ``strip`` without arguments trims the same set
    but for U+001C..U+001F, which JavaScript keeps, and U+FEFF, which it trims)."""
    return text.strip(_JS_BLANKS)


_JS_BLANKS = ("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
              "\u2028\u2029\u202f\u205f\u3000\ufeff")


def role_command(commands: list[str], pre: list[str], post: list[str], view: Mapping[str, Any],
                 at_most: int | None = None) -> str:
    """A role's entrypoint: ``pre + commands + post`` trimmed, joined and rendered."""
    return render("\n".join(js_trim(c) for c in (*pre, *commands, *post)), view, at_most)


def render_secrets(command: str, secrets: Mapping[str, Any] | None) -> str:
    """The command the container runs: OpenPAI's runtime rendering of ``$secrets`` (see the module's
    docstring). Only the launcher calls this, at the last moment; nothing it returns is stored."""
    if not secrets:
        return command
    view = {"$secrets": _indexed(secrets)}
    out = []
    for token in tokens(command):
        if token.nested:
            continue
        if token.kind == "text":
            out.append(token.value)
        elif token.kind in ("name", "&"):
            value = lookup(view, _INDEX.sub(r".\1", token.value))
            out.append("" if value is None else _python_text(value))
    return "".join(out)


def _indexed(value: Any) -> Any:
    """The runtime's view of the secrets: lists as mappings keyed "0", "1", ..."""
    if isinstance(value, Mapping):
        return {str(k): _indexed(v) for k, v in value.items()}
    if isinstance(value, list):
        return {str(i): _indexed(v) for i, v in enumerate(value)}
    return value


def _python_text(value: Any) -> str:
    """pystache wrote a value with Python's ``str`` (``True``, ``1.0``)."""
    return str(value)


def render_auth(auth: Mapping[str, Any], secrets: Mapping[str, Any]) -> dict[str, str]:
    """A registry's credentials with ``$secrets`` rendered (``$parameters`` stay as written)."""
    return {key: render(str(value), {"$secrets": secrets}) for key, value in auth.items()}


def masked(document: Mapping[str, Any]) -> dict[str, Any]:
    """The document as it may be stored and shown: its top-level ``secrets`` replaced by ``"******"``
    (a ``secrets`` key anywhere else is the user's own, e.g. a parameter, and stays)."""
    return {k: (MASK if k == "secrets" else v) for k, v in document.items()}
