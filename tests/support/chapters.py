"""What the runner tests share: a minimal chapter (a Jupytext MyST notebook with a parameters
cell declaring ``hardware``) written into a checkout's notebooks/ folder."""

from __future__ import annotations

from pathlib import Path

from kvoffload.bookbuild.runner import Chapter

HEAD = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# {title}

{prose}

```{{code-cell}} ipython3
:tags: [parameters]

hardware = "article-reference"
```

{cells}
"""


def write_chapter(root: Path, name: str, *codes: str, prose: str = "Some prose.") -> Chapter:
    """Write notebooks/<name>.md with a title, ``prose``, the parameters cell, then ``codes``."""
    path = root / "notebooks" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = "\n".join(f"```{{code-cell}} ipython3\n{code}\n```\n" for code in codes)
    path.write_text(HEAD.format(title=name, prose=prose, cells=cells), encoding="utf-8")
    return Chapter(path)
