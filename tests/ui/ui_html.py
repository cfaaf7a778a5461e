"""A page's HTML as a tree of elements, for the pages' tests (the standard library's parser)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict
    children: list = field(default_factory=list)  # Elements and strings

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def find_all(self, tag: str, **attrs) -> list["Element"]:
        """Every element below this one with `tag` whose attributes include `attrs`
        (class_: one of its classes; data_x for data-x; True: present)."""
        wanted = {"class" if k == "class_" else k.replace("_", "-"): v for k, v in attrs.items()}
        found = []
        for c in self.children:
            if isinstance(c, Element):
                if c.tag == tag and all(_has(c.attrs, k, v) for k, v in wanted.items()):
                    found.append(c)
                found += c.find_all(tag, **attrs)
        return found

    def child(self, tag: str) -> "Element | None":
        return next((c for c in self.children if isinstance(c, Element) and c.tag == tag), None)


def _has(attrs: dict, name: str, value) -> bool:
    if value is True:
        return name in attrs
    if name == "class":
        return value in attrs.get("class", "").split()
    return attrs.get(name) == value


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: v if v is not None else "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Element(tag, {k: v if v is not None else "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(html: str) -> Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root
