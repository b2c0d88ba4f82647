"""Text and HTML views of a GPU report: the verdict, the problems with fixes, then the facts.

Pure consumers of the report dict (``GPUReport.to_dict()``). A field NVML or TensorFlow could
not answer reads "not available", with NVML's reason where it gave one. Everything in the
HTML comes from the machine or the environment, so all of it is escaped.
"""

from __future__ import annotations

import textwrap
from html import escape
from typing import Any

from .nvml_facts import NOT_AVAILABLE, gib

Rows = list[tuple[str, str]]
TEXT_WIDTH = 100
SEVERITY_COLOURS = {"error": "#b00020", "warning": "#a15c00", "info": "#1f5fa8"}


def _na(value: Any, reason: str | None = None) -> str:
    if value is None or value == "":
        return f"{NOT_AVAILABLE} ({reason})" if reason else NOT_AVAILABLE
    return str(value)


# -- sections as rows ------------------------------------------------------------------------


def tensorflow_rows(tf: dict[str, Any]) -> Rows:
    if not tf.get("available", True):
        return [("TensorFlow", f"cannot be imported: {tf.get('error')}")]
    if tf.get("error"):
        return [("TensorFlow", f"facts could not be read: {tf.get('error')}")]
    distributions = ", ".join(f"{k} {v}" for k, v in (tf.get("distributions") or {}).items())
    plugins = ", ".join(f"{k} {v}" for k, v in (tf.get("plugins") or {}).items())
    rows: Rows = [
        ("version", f"{tf.get('version')}" + (f" ({distributions})" if distributions else "")),
    ]
    if plugins:
        rows.append(("plugins", plugins))
    cuda = "yes" if tf.get("built_with_cuda") else "no"
    if tf.get("built_with_rocm"):
        cuda += " (ROCm build)"
    rows += [
        ("is_built_with_cuda", cuda),
        ("CUDA / cuDNN (build)", f"{_na(tf.get('cuda_version'))} / {_na(tf.get('cudnn_version'))}"),
    ]
    if tf.get("cuda_compute_capabilities"):
        rows.append(("compute capabilities (build)", ", ".join(tf["cuda_compute_capabilities"])))
    initialized = tf.get("initialized")
    rows.append(
        (
            "runtime",
            "initialised: device settings (memory growth, visible devices) can no longer change"
            if initialized
            else "not initialised: device settings can still change"
            if initialized is False
            else NOT_AVAILABLE,
        )
    )
    devices = tf.get("physical_devices") or {}
    rows.append(("physical devices", ", ".join(f"{k}: {v}" for k, v in devices.items()) or "none"))
    gpus = tf.get("gpus") or []
    if not gpus:
        rows.append(("GPUs", "none"))
    for gpu in gpus:
        cc = gpu.get("compute_capability")
        growth = gpu.get("memory_growth")
        parts = [
            _na(gpu.get("device_name")),
            f"compute capability {cc[0]}.{cc[1]}" if cc else "compute capability not available",
            "memory growth on"
            if growth
            else "memory growth off" + (" (default)" if growth is None else ""),
        ]
        if not gpu.get("visible", True):
            parts.append("hidden by tf.config.set_visible_devices")
        rows.append(
            (str(gpu.get("name", "GPU")).replace("/physical_device:", ""), ", ".join(parts))
        )
    logical = tf.get("logical_gpus")
    if logical is None:
        rows.append(("logical GPUs", "not read (reading them would initialise the runtime)"))
    else:
        rows.append(("logical GPUs", str(len(logical)) if logical else "none"))
        for entry in logical:
            rows.append(
                (
                    f"  {entry.get('name')}",
                    f"memory in use {gib(entry.get('memory_current'))}, "
                    f"peak {gib(entry.get('memory_peak'))}"
                    if entry.get("memory_current") is not None
                    else f"memory {NOT_AVAILABLE}",
                )
            )
    policy = tf.get("mixed_precision_policy")
    keras = tf.get("keras_version")
    rows.append(
        (
            "mixed precision policy",
            (policy or "not read (Keras not imported yet; its default is float32)")
            + (f" (Keras {keras})" if keras and policy else ""),
        )
    )
    rows.append(("XLA JIT (tf.config.optimizer)", str(tf.get("jit") or "off")))
    log = tf.get("device_listing_log")
    if log:
        rows.append(("TensorFlow log (device listing)", "\n".join(log)))
    return rows


def env_rows(env: dict[str, Any]) -> Rows:
    return [(name, "not set" if value is None else repr(value)) for name, value in env.items()]


def _device_rows(device: dict[str, Any]) -> Rows:
    why = device.get("unavailable") or {}

    def pair(value: Any, maximum: Any, unit: str, key: str, key_max: str) -> str:
        if value is None and maximum is None:
            return _na(None, why.get(key) or why.get(key_max))
        return f"{_na(value, why.get(key))} of {_na(maximum, why.get(key_max))}{unit}"

    rows: Rows = [
        ("name", _na(device.get("name"), why.get("name"))),
        ("uuid", _na(device.get("uuid"), why.get("uuid"))),
    ]
    cc = device.get("compute_capability")
    rows.append(
        (
            "compute capability",
            f"{cc[0]}.{cc[1]}" if cc else _na(None, why.get("compute_capability")),
        )
    )
    if device.get("memory_total") is not None:
        rows.append(
            ("memory", f"{gib(device.get('memory_used'))} used of {gib(device['memory_total'])}")
        )
    else:
        rows.append(("memory", _na(None, why.get("memory"))))
    if "utilization_gpu" in device:
        gpu_util = device.get("utilization_gpu")
        rows.append(
            (
                "utilization",
                f"{gpu_util} % (memory controller {device.get('utilization_memory')} %)"
                if gpu_util is not None
                else _na(None, why.get("utilization")),
            )
        )
        temperature = device.get("temperature_c")
        rows.append(
            (
                "temperature",
                f"{temperature} °C"
                if temperature is not None
                else _na(None, why.get("temperature")),
            )
        )
        power, limit = device.get("power_w"), device.get("power_limit_w")
        drawn = f"{power:.0f} W" if power is not None else _na(None, why.get("power"))
        allowed = f"{limit:.0f} W" if limit is not None else _na(None, why.get("power_limit"))
        rows.append(("power draw / limit", f"{drawn} / {allowed}"))
        rows.append(
            (
                "SM clock",
                pair(
                    device.get("sm_clock_mhz"),
                    device.get("sm_clock_max_mhz"),
                    " MHz",
                    "sm_clock",
                    "sm_clock_max",
                ),
            )
        )
        rows.append(
            (
                "memory clock",
                pair(
                    device.get("memory_clock_mhz"),
                    device.get("memory_clock_max_mhz"),
                    " MHz",
                    "memory_clock",
                    "memory_clock_max",
                ),
            )
        )
        reasons = device.get("clock_event_reasons")
        rows.append(
            (
                "clock event (throttle) reasons",
                (", ".join(reasons) or "none")
                if reasons is not None
                else _na(None, why.get("clock_event_reasons")),
            )
        )
    gen, gen_max = device.get("pcie_gen"), device.get("pcie_gen_max")
    width, width_max = device.get("pcie_width"), device.get("pcie_width_max")
    lanes = (
        f"x{width} of x{width_max} lanes"
        if width is not None and width_max is not None
        else f"lanes {pair(width, width_max, '', 'pcie_width', 'pcie_width_max')}"
    )
    pcie = f"gen {pair(gen, gen_max, '', 'pcie_gen', 'pcie_gen_max')}, {lanes} (current of max)"
    if gen and gen_max and gen < gen_max and not device.get("utilization_gpu"):
        pcie += "; an idle GPU lowers its link generation to save power"
    rows.append(("PCIe link", pcie))
    if "mig_mode" in device:
        mig = device.get("mig_mode")
        rows.append(
            (
                "MIG mode",
                _na(None, why.get("mig_mode")) if mig is None else ("on" if mig else "off"),
            )
        )
        ecc = device.get("ecc_mode")
        errors = device.get("ecc_errors")
        if ecc is None:
            rows.append(("ECC", _na(None, why.get("ecc_mode"))))
        elif not ecc:
            rows.append(("ECC", "off"))
        else:
            counts = errors or {}
            uncorrected = _na(counts.get("uncorrected_volatile"), why.get("ecc_uncorrected"))
            corrected = _na(counts.get("corrected_volatile"), why.get("ecc_corrected"))
            rows.append(
                (
                    "ECC",
                    f"on; {uncorrected} uncorrected, {corrected} corrected since the driver loaded",
                )
            )
        processes = device.get("processes")
        if processes is None:
            rows.append(("processes", _na(None, why.get("compute_processes"))))
        elif not processes:
            rows.append(("processes", "none"))
        else:
            for process in processes:
                memory = process.get("memory_used")
                rows.append(
                    (
                        f"process {process.get('pid')}",
                        f"{process.get('name') or 'name not available'}, "
                        + (gib(memory) if memory is not None else "memory not available")
                        + (", this process" if process.get("is_self") else ""),
                    )
                )
    return rows


def nvml_rows(nvml: dict[str, Any]) -> tuple[Rows, list[tuple[str, Rows]]]:
    """Rows about the driver, and (title, rows) per GPU."""
    if not nvml.get("available"):
        return [("NVML", f"not available: {nvml.get('reason')}")], []
    why = nvml.get("unavailable") or {}
    rows: Rows = [
        ("driver version", _na(nvml.get("driver_version"), why.get("driver_version"))),
        (
            "CUDA version the driver supports",
            _na(nvml.get("cuda_driver_version"), why.get("cuda_driver_version")),
        ),
        ("GPUs", str(len(nvml.get("devices") or []))),
    ]
    if nvml.get("reason"):
        rows.append(("note", str(nvml["reason"])))
    devices = [(f"GPU {d.get('index')}", _device_rows(d)) for d in nvml.get("devices") or []]
    return rows, devices


def cuda_library_rows(libraries: dict[str, Any] | None) -> Rows:
    if not libraries or not libraries.get("checked"):
        return []
    return [
        (soname, path or "not found") for soname, path in (libraries.get("libraries") or {}).items()
    ]


# -- text ------------------------------------------------------------------------------------


def _wrap(text: str, width: int) -> list[str]:
    """Wrap each line of `text` to `width`; short lines (code) stay exactly as they are."""
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        hang = "  " if line.startswith("- ") else ""
        lines += textwrap.wrap(line, width, subsequent_indent=hang, break_on_hyphens=False) or [""]
    return lines


def _text_rows(rows: Rows, indent: str = "  ") -> list[str]:
    if not rows:
        return []
    width = min(max(len(key) for key, _ in rows), 34)
    room = max(40, TEXT_WIDTH - len(indent) - width - 2)
    lines = []
    for key, value in rows:
        value_lines = _wrap(str(value), room)
        lines.append(f"{indent}{key:<{width}}  {value_lines[0]}")
        lines += [f"{indent}{'':<{width}}  {more}" for more in value_lines[1:]]
    return lines


def render_text(report: dict[str, Any]) -> str:
    facts = report["facts"]
    lines = ["GPU doctor", "", *_wrap(report["verdict"], TEXT_WIDTH), ""]
    found = report["problems"]
    if found:
        lines.append("Problems")
        for item in found:
            lines.append(f"  [{item['severity']}] {item['code']}: {item['title']}")
            lines += [f"      {line}" for line in _wrap(item["message"], TEXT_WIDTH - 6)]
            fix_lines = _wrap(item["fix"], TEXT_WIDTH - 11)
            if item["fix"]:
                lines.append(f"      Fix: {fix_lines[0]}")
                lines += [f"           {line}" for line in fix_lines[1:]]
        lines.append("")
    lines.append("TensorFlow")
    lines += _text_rows(tensorflow_rows(facts.get("tensorflow") or {}))
    libraries = cuda_library_rows(facts.get("cuda_libraries"))
    if libraries:
        lines += ["", "CUDA libraries (files the loader could find)"]
        lines += _text_rows(libraries)
    lines += ["", "Environment"]
    lines += _text_rows(env_rows(facts.get("env") or {}))
    driver_rows, devices = nvml_rows(facts.get("nvml") or {})
    lines += ["", "NVIDIA driver (NVML)"]
    lines += _text_rows(driver_rows)
    for title, rows in devices:
        lines += ["", f"  {title}"]
        lines += _text_rows(rows, indent="    ")
    seconds = facts.get("collect_seconds")
    if seconds is not None:
        lines += ["", f"(facts read in {seconds:.2f} s)"]
    return "\n".join(lines)


# -- HTML ------------------------------------------------------------------------------------

_STYLE = (
    "<style>"
    ".tfgpu{font-family:system-ui,sans-serif;font-size:13px;line-height:1.4;max-width:980px}"
    ".tfgpu h4{margin:14px 0 4px 0}"
    ".tfgpu table{border-collapse:collapse}"
    ".tfgpu td{padding:1px 12px 1px 0;vertical-align:top;text-align:left}"
    ".tfgpu td.k{color:#555;white-space:nowrap}"
    ".tfgpu td.v{white-space:pre-wrap}"
    ".tfgpu .verdict{font-size:15px;padding:8px 10px;border-left:4px solid;margin:4px 0 8px 0}"
    ".tfgpu .problem{margin:6px 0;padding-left:10px;border-left:3px solid}"
    ".tfgpu pre{margin:2px 0;white-space:pre-wrap;font-size:12px}"
    "</style>"
)


def _html_rows(rows: Rows) -> str:
    body = "".join(
        f"<tr><td class='k'>{escape(key)}</td><td class='v'>{escape(str(value))}</td></tr>"
        for key, value in rows
    )
    return f"<table>{body}</table>"


def render_html(report: dict[str, Any]) -> str:
    facts = report["facts"]
    found = report["problems"]
    worst = found[0]["severity"] if found else "ok"
    colour = SEVERITY_COLOURS.get(worst, "#2e7d32")
    parts = [
        _STYLE,
        "<div class='tfgpu'>",
        f"<div class='verdict' style='border-color:{colour}'>{escape(report['verdict'])}</div>",
    ]
    for item in found:
        item_colour = SEVERITY_COLOURS.get(item["severity"], "#555")
        parts.append(
            f"<div class='problem' style='border-color:{item_colour}'>"
            f"<b>{escape(item['title'])}</b> "
            f"<code>{escape(item['code'])}</code> <i>{escape(item['severity'])}</i>"
            f"<div>{escape(item['message'])}</div>"
            f"<div><b>Fix:</b><pre>{escape(item['fix'])}</pre></div></div>"
        )
    parts.append("<h4>TensorFlow</h4>")
    parts.append(_html_rows(tensorflow_rows(facts.get("tensorflow") or {})))
    libraries = cuda_library_rows(facts.get("cuda_libraries"))
    if libraries:
        parts.append("<h4>CUDA libraries</h4>" + _html_rows(libraries))
    parts.append("<h4>Environment</h4>" + _html_rows(env_rows(facts.get("env") or {})))
    driver_rows, devices = nvml_rows(facts.get("nvml") or {})
    parts.append("<h4>NVIDIA driver (NVML)</h4>" + _html_rows(driver_rows))
    for title, rows in devices:
        parts.append(f"<h4>{escape(title)}</h4>" + _html_rows(rows))
    parts.append("</div>")
    return "".join(parts)
