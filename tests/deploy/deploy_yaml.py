"""A small YAML reader for the block-style subset that ``deploy/`` uses, for when PyYAML is absent.

The venv has no PyYAML (and the project does not depend on it), yet the deploy tests must read the
Kubernetes manifests and the Prometheus files. This reader understands exactly what those files
use: block mappings and sequences, ``- key: value`` items, flow ``[...]`` / ``{...}``, single- and
double-quoted and plain scalars (null, bool, int, float, str), literal blocks (``|``, ``|-``),
comments and ``---`` document separators. Anything else (anchors, tags, folded ``>`` blocks,
multi-line plain scalars) raises ``ValueError`` naming the line, so a file drifting outside the
subset fails the tests loudly instead of being misread. When PyYAML is importable, the tests also
check that both readers agree.

Examples
--------
>>> load("a: 1\\nb:\\n  - x: 'y'\\n    z: [1, \\"two\\"]\\nc: |\\n  line\\n")
{'a': 1, 'b': [{'x': 'y', 'z': [1, 'two']}], 'c': 'line\\n'}
"""

from __future__ import annotations

import json
import re
from typing import Any

_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def _plain(text: str) -> Any:
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text[0] in "&*!%@`>":
        raise ValueError(f"unsupported YAML construct {text!r}")
    return text


def _strip_comment(text: str) -> str:
    """Drop a trailing `` # comment`` that is outside quotes."""
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1  # an escaped character cannot close the string
            elif ch == quote:
                quote = None
        elif ch in "\"'" and (i == 0 or text[i - 1] in " [{,:"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
        i += 1
    return text.rstrip()


class _Flow:
    """Flow collections and quoted scalars: ``[a, "b", {c: 1}]``."""

    def __init__(self, text: str, where: str):
        self.s, self.i, self.where = text, 0, where

    def fail(self, msg: str) -> ValueError:
        return ValueError(f"{self.where}: {msg} in {self.s!r}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def value(self, in_flow: bool) -> Any:
        self.ws()
        if self.i >= len(self.s):
            return None
        ch = self.s[self.i]
        if ch == "[":
            self.i += 1
            out = []
            self.ws()
            if self.s[self.i:self.i + 1] == "]":
                self.i += 1
                return out
            while True:
                out.append(self.value(True))
                self.ws()
                nxt = self.s[self.i:self.i + 1]
                self.i += 1
                if nxt == "]":
                    return out
                if nxt != ",":
                    raise self.fail("expected ',' or ']'")
        if ch == "{":
            self.i += 1
            out_map: dict[Any, Any] = {}
            self.ws()
            if self.s[self.i:self.i + 1] == "}":
                self.i += 1
                return out_map
            while True:
                key = self.value(True)
                self.ws()
                if self.s[self.i:self.i + 1] != ":":
                    raise self.fail("expected ':' in a flow mapping")
                self.i += 1
                out_map[key] = self.value(True)
                self.ws()
                nxt = self.s[self.i:self.i + 1]
                self.i += 1
                if nxt == "}":
                    return out_map
                if nxt != ",":
                    raise self.fail("expected ',' or '}'")
        if ch == '"':
            j = self.i + 1
            while j < len(self.s) and self.s[j] != '"':
                j += 2 if self.s[j] == "\\" else 1
            if j >= len(self.s):
                raise self.fail("unterminated double-quoted string")
            raw = self.s[self.i:j + 1]
            self.i = j + 1
            return json.loads(raw)  # YAML's double-quoted escapes used here are JSON's
        if ch == "'":
            j = self.i + 1
            buf = []
            while True:
                if j >= len(self.s):
                    raise self.fail("unterminated single-quoted string")
                if self.s[j] == "'":
                    if self.s[j + 1:j + 2] == "'":
                        buf.append("'")
                        j += 2
                        continue
                    break
                buf.append(self.s[j])
                j += 1
            self.i = j + 1
            return "".join(buf)
        # plain scalar: up to a flow indicator inside [...]/{...}, else to the end
        j = self.i
        stops = ",]}" if in_flow else ""
        while j < len(self.s) and self.s[j] not in stops:
            if in_flow and self.s[j] == ":" and (j + 1 == len(self.s) or self.s[j + 1] == " "):
                break
            j += 1
        text = self.s[self.i:j].strip()
        self.i = j
        return _plain(text)

    def whole(self) -> Any:
        v = self.value(False)
        self.ws()
        if self.i != len(self.s):
            raise self.fail("trailing characters")
        return v


def _split_key(content: str) -> tuple[str, str] | None:
    """``key: rest`` -> (key, rest) when the line is a mapping entry (colon outside quotes)."""
    quote = None
    for i, ch in enumerate(content):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'" and i == 0:
            quote = ch
        elif ch == ":" and (i + 1 == len(content) or content[i + 1] == " "):
            return content[:i], content[i + 1:].strip()
        elif ch in "[{" and i == 0:
            return None
    return None


class _Block:
    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.i = 0

    def where(self, i: int | None = None) -> str:
        return f"line {(self.i if i is None else i) + 1}"

    def peek(self) -> tuple[int, str] | None:
        """Indent and content of the next significant line (skips blanks and comments)."""
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if "\t" in line[: len(line) - len(line.lstrip())]:
                raise ValueError(f"{self.where()}: tab in indentation")
            stripped = line.strip()
            if stripped and not stripped.startswith("#") and stripped not in ("---", "..."):
                return len(line) - len(line.lstrip(" ")), stripped
            if stripped in ("---", "..."):
                return None
            self.i += 1
        return None

    def node(self, indent: int) -> Any:
        nxt = self.peek()
        if nxt is None or nxt[0] < indent:
            return None
        ind, content = nxt
        if content == "-" or content.startswith("- "):
            return self.sequence(ind)
        return self.mapping(ind)

    def value_after_key(self, ind: int, rest: str, *, seq_ok: bool) -> Any:
        rest = _strip_comment(rest)
        if rest in ("|", "|-", "|+"):
            return self.literal(ind, rest)
        if rest.startswith(">") or rest.startswith("|"):
            raise ValueError(f"{self.where()}: unsupported block scalar {rest!r}")
        if rest:
            self.i += 1
            return _Flow(rest, self.where(self.i - 1)).whole()
        self.i += 1
        nxt = self.peek()
        if nxt is None:
            return None
        if nxt[0] > ind:
            return self.node(nxt[0])
        if seq_ok and nxt[0] == ind and (nxt[1] == "-" or nxt[1].startswith("- ")):
            return self.sequence(ind)  # "key:\n- item" (sequence not indented under its key)
        return None

    def mapping(self, ind: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        while True:
            nxt = self.peek()
            if nxt is None or nxt[0] < ind:
                return out
            if nxt[0] > ind:
                raise ValueError(f"{self.where()}: unexpected indentation")
            content = nxt[1]
            if content == "-" or content.startswith("- "):
                return out
            kv = _split_key(content)
            if kv is None:
                raise ValueError(f"{self.where()}: expected 'key: value', got {content!r}")
            key = _Flow(kv[0], self.where()).whole()
            if key in out:
                raise ValueError(f"{self.where()}: duplicate key {key!r}")
            out[key] = self.value_after_key(ind, kv[1], seq_ok=True)

    def sequence(self, ind: int) -> list[Any]:
        out: list[Any] = []
        while True:
            nxt = self.peek()
            if nxt is None or nxt[0] < ind:
                return out
            content = nxt[1]
            if nxt[0] > ind or not (content == "-" or content.startswith("- ")):
                if nxt[0] == ind:
                    return out
                raise ValueError(f"{self.where()}: unexpected indentation")
            item = content[1:].lstrip(" ")
            if not item:
                self.i += 1
                deeper = self.peek()
                out.append(self.node(deeper[0]) if deeper and deeper[0] > ind else None)
                continue
            item_ind = ind + (len(content) - len(item))
            if item.startswith("- "):
                raise ValueError(f"{self.where()}: nested '- -' sequences are not supported")
            if _split_key(item) is not None:
                # "- key: v" starts a mapping indented at the item's column: rewrite the line so
                # the mapping reader sees it at that column.
                self.lines[self.i] = " " * item_ind + item
                out.append(self.mapping(item_ind))
            else:
                out.append(self.value_after_key(ind, item, seq_ok=False))

    def literal(self, ind: int, style: str) -> str:
        self.i += 1
        body: list[str] = []
        block_ind = None
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.strip():
                cur = len(line) - len(line.lstrip(" "))
                if cur <= ind:
                    break
                if block_ind is None:
                    block_ind = cur
                if cur < block_ind:
                    raise ValueError(f"{self.where()}: literal block line less indented than its first line")
                body.append(line[block_ind:])
            else:
                body.append("")
            self.i += 1
        while body and body[-1] == "":
            body.pop()
        text = "\n".join(body)
        if style == "|-":
            return text
        return text + "\n" if text else ""  # "|+" (keep) is not used by deploy/; treated as "|"

    def document(self) -> Any:
        nxt = self.peek()
        if nxt is None:
            return None
        return self.node(nxt[0])


def load_all(text: str) -> list[Any]:
    """All documents of a YAML stream (``---`` separated); empty documents are skipped."""
    parser = _Block(text)
    docs: list[Any] = []
    while parser.i < len(parser.lines):
        doc = parser.document()
        nxt = parser.peek()
        if nxt is not None:
            raise ValueError(f"{parser.where()}: unexpected content {nxt[1]!r}")
        if doc is not None:
            docs.append(doc)
        parser.i += 1  # past the '---' (or the end)
    return docs


def load(text: str) -> Any:
    """The single document of a YAML text."""
    docs = load_all(text)
    if len(docs) != 1:
        raise ValueError(f"expected one YAML document, found {len(docs)}")
    return docs[0]
