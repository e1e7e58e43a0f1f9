"""The laptop's own settings: ``~/.config/tunelab/config.toml`` (or ``$XDG_CONFIG_HOME``).

```toml
controller = "lab-ctl.example:50050"
token_file = "~/.config/tunelab/controller.token"
tls_ca = "~/.config/tunelab/ca.pem"
```
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

KEYS = {"controller", "token_file", "tls_ca", "tls_cert", "tls_key"}


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tunelab" / "config.toml"


def load_user_config(path: Path | None = None) -> dict[str, str]:
    """Known keys of the file (paths expanded); empty when there is no file."""
    target = path or config_path()
    try:
        data: dict[str, Any] = tomllib.loads(target.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{target}: {exc}") from None
    unknown = set(data) - KEYS
    if unknown:
        raise ValueError(f"{target}: unknown keys {sorted(unknown)} (known: {sorted(KEYS)})")
    return {
        k: str(Path(str(v)).expanduser()) if k != "controller" else str(v) for k, v in data.items()
    }
