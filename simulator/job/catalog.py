"""Model presets (data/models) and the hardware catalog (data/hardware): reading, by name or file."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import ConfigError
from simulator.job.specs import HardwareSpec, ModelSpec, parse


def data_dir() -> Path:
    """The data/ folder: presets, hardware, measurements, spaces (VTRAIN_DATA_DIR overrides it).

    An installed wheel carries it as package data inside this package (`simulator/data`,
    mapped from the repository's top-level data/ by pyproject.toml); a source checkout or an
    editable install reads the repository's data/ next to this package. Either way the answer
    does not depend on the working directory.
    """
    override = os.environ.get("VTRAIN_DATA_DIR")
    return Path(override) if override else _packaged_data()


@lru_cache(maxsize=1)
def _packaged_data() -> Path:
    here = Path(__file__).resolve().parent.parent  # simulator/
    installed = here / "data"
    return installed if installed.is_dir() else here.parent / "data"


def read_yaml(path: Path) -> Any:
    """Parse a job, preset, hardware or settings file: `.json` as JSON (strict: no trailing
    commas, no NaN; tabs are fine), anything else as YAML. A key given twice is an error in both
    (YAML and JSON parsers would silently keep the last one)."""
    if path.suffix.lower() == ".json":
        return read_json(path)
    text = _read_text(path)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {_yaml_problem(exc)}") from None


def read_json(path: Path) -> Any:
    """Parse a JSON file as JSON, whatever its name (vTrain's `load_from_file` does `json.load`)."""
    return _parse_json(path, _read_text(path))


def _read_text(path: Path) -> str:
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a file; give the path of a YAML or JSON file")
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file; expected a YAML or JSON file") from None


def _parse_json(path: Path, text: str) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ConfigError(f"{path}: key {', '.join(repr(k) for k in twice)} appears more than once "
                              f"in one object; keep one")
        return dict(pairs)

    def no_constant(name: str) -> Any:
        raise ConfigError(f"{path}: {name} is not a JSON number; write a finite number")

    try:
        return json.loads(text, object_pairs_hook=unique, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        before = exc.doc[:exc.pos].rstrip()
        hint = ("; a trailing comma after the last item (JSON allows none): remove it"
                if before.endswith(",") and exc.doc[exc.pos:exc.pos + 1] in "}]" else "")
        raise ConfigError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column "
                          f"{exc.colno}{hint}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping with the same key twice is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool):
                continue  # unhashable keys: the base constructor reports them
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}' (lines {seen[key]} and {line}); keep one",
                    key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        if exc.problem.startswith("duplicate key"):
            return exc.problem
        return f"{exc.problem}{where}"
    return str(exc).splitlines()[0]


def model_names() -> list[str]:
    return sorted(p.stem for p in (data_dir() / "models").glob("*.yaml"))


def hardware_names() -> list[str]:
    return sorted(p.stem for p in (data_dir() / "hardware").glob("*.yaml") if p.stem != "aliases")


def _unknown(kind: str, name: str, known: list[str]) -> ConfigError:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.4)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"unknown {kind} '{name}'{hint}; known: {', '.join(known)}")


@lru_cache(maxsize=64)
def _model_preset(name: str, root: str) -> ModelSpec:
    path = Path(root) / "models" / f"{name}.yaml"
    if not path.exists():
        raise _unknown("model preset", name, model_names())
    return parse(ModelSpec, read_yaml(path), f"model preset {name}")


def load_model(name: str, overrides: dict[str, Any] | None = None) -> ModelSpec:
    """A preset by name, optionally with fields overridden (e.g. seq_length)."""
    base = _model_preset(name.lower(), str(data_dir()))
    if not overrides:
        return base
    return parse(ModelSpec, {**base.model_dump(exclude_none=True), **overrides}, "model")


@lru_cache(maxsize=64)
def _hardware_file(path: str, mtime_ns: int) -> HardwareSpec:
    """Parsed hardware file, cached per (path, modification time): an edited file is re-read."""
    return parse(HardwareSpec, read_yaml(Path(path)), f"hardware file {path}")


@lru_cache(maxsize=8)
def _aliases(path: str, mtime_ns: int) -> dict[str, str]:
    """vTrain-style GPU names -> catalog ids, cached per (path, modification time)."""
    return dict(read_yaml(Path(path)) or {})


def _read_hardware(path: Path) -> HardwareSpec:
    return _hardware_file(str(path), path.stat().st_mtime_ns)


def resolve_hardware(name_or_file: str) -> HardwareSpec:
    """A catalog id (`a100-80gb`), an alias (vTrain's `A100`), or a path to a hardware YAML file."""
    candidate = Path(name_or_file)
    if candidate.suffix in {".yaml", ".yml", ".json"} or candidate.is_file():
        if not candidate.is_file():
            raise ConfigError(f"hardware file {name_or_file} does not exist")
        return _read_hardware(candidate.resolve())
    aliases_file = data_dir() / "hardware" / "aliases.yaml"
    aliases = _aliases(str(aliases_file), aliases_file.stat().st_mtime_ns)
    key = aliases.get(name_or_file, aliases.get(name_or_file.upper(), name_or_file)).lower()
    path = data_dir() / "hardware" / f"{key}.yaml"
    if not path.exists():
        raise _unknown("GPU type", name_or_file, hardware_names() + sorted(aliases))
    return _read_hardware(path)


def hardware_fingerprint(hardware: HardwareSpec) -> str:
    """Content hash of a hardware description (every field, efficiencies included).

    Saved models record it so that a model trained under one hardware model is never silently
    used with another.
    """
    fields = hardware.model_dump(mode="json", exclude={"description", "source", "calibration"})
    for unset in ("attention_max_efficiency", "attention_k_half"):
        if fields["efficiency"].get(unset) is None:  # unset: as before the field
            fields["efficiency"].pop(unset, None)
    canonical = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
