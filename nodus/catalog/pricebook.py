"""Loading the price book: a compact YAML file expanded into fully explicit Offerings.

The file (``pricebook.yaml`` beside this module ships with Nodus; ``--price-book FILE`` names
another) lists host shapes: GPU hosts per accelerator with a rate per GPU count, and CPU-only hosts,
each offered in some region classes and optionally also as interruptible (spot) hosts.
:func:`load` validates the whole file and reports every problem at once, each naming its entry and
field (``gpuHosts[2] (h100-sxm-80g).sizes.16: ...``); then it expands the file into
:class:`Offering` values whose :meth:`Offering.body` is the Offering object the API server stores
(``docs/running-jobs.md``). Nothing is left implicit in an Offering: its rate is already the
region's and the market's, its vCPU, memory and disk already scaled to its GPU count.

Money is exact: a rate is a quoted decimal string read into :class:`~decimal.Decimal` (a YAML number
is refused, because the YAML parser would already have made it a float) with at most 6 fraction
digits (micro-USD); a derived rate is rounded half-up to 6 fraction digits.

Accelerator ids are checked against the catalog the caller passes (the API server passes the one
``spec.resources.gpu.type`` is validated against), so that an offering never names a GPU a Job
cannot ask for; the book's family and memory per GPU must agree with that catalog.

The book also prices storage (``storage``: USD per GiB-month above a free inclusion per Job), which the
API server hands to the storage billing controller through the ledger door (ADR 0023), and the platform
fee (``platformFee``: USD per GPU-hour, or per host-hour for an attempt that takes no GPU) that an
attempt on a Pool host (the customer's own hardware) pays instead of an offering's rate (ADR 0048).
A GPU host entry may say ``shareable: true``: attempts then share its hosts, each with its own GPUs,
at the offering's rate for the GPUs it takes (default false: a host runs one attempt).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from nodus.apimachinery import units

API_VERSION = "nodus.dev/v1"
KIND = "Offering"
VERSION_LABEL = "nodus.dev/pricebook-version"
SHIPPED = "the shipped price book (nodus/catalog/pricebook.yaml)"
# Price books shipped with Nodus that --price-book names by a word: the simulated cloud's (the default) and AWS's.
SHIPPED_BOOKS = {"sim": "pricebook.yaml", "aws": "pricebook-aws.yaml"}
_INSTANCE_TYPE = r"^[a-z0-9][a-z0-9-]*\.[a-z0-9-]+$"

_MICRO = Decimal("0.000001")
_DECIMAL = re.compile(r"^\d+(\.\d{1,6})?$")
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_LABEL_VALUE = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
_BINARY_UNITS = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))

RegionClassName = Literal["us", "eu", "asia"]
GpuCount = Literal[1, 2, 4, 8]


class Accelerator(Protocol):
    """A known accelerator variant (``nodus.apis.v1.accelerators.Accelerator`` is one)."""

    @property
    def id(self) -> str: ...

    @property
    def family(self) -> str: ...

    @property
    def memory_bytes(self) -> int: ...


class PriceBookError(ValueError):
    """A price book that cannot be used; ``problems`` lists each, naming its entry and field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"price book {source} is invalid:\n" + "\n".join(f"  - {p}" for p in problems))


# --- the file's scalars ------------------------------------------------------------------------


def _decimal(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(
            f'must be a quoted decimal string such as "2.49", not the YAML {type(value).__name__} {value!r} '
            "(YAML numbers are read as floats)"
        )
    if not _DECIMAL.match(value):
        raise ValueError(f'must be a decimal string with at most 6 fraction digits, such as "2.49", not {value!r}')
    return Decimal(value)


def _positive(value: Decimal) -> Decimal:
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _duration(value: str) -> str:
    if units.parse_duration(value) <= units.parse_duration("0s"):
        raise ValueError("must be longer than 0s")
    return value


def _quantity(value: str) -> str:
    amount = units.parse_quantity(value)
    if amount <= 0 or amount != amount.to_integral_value():
        raise ValueError(f"must be a positive whole number of bytes such as 80Gi or 2Ti, not {value!r}")
    return value


def _size(value: str) -> str:
    amount = units.parse_quantity(value)
    if amount < 0 or amount != amount.to_integral_value():
        raise ValueError(f"must be a whole number of bytes of at least 0 such as 10Gi, 512Ki or 0, not {value!r}")
    return value


Rate = Annotated[Decimal, BeforeValidator(_decimal), AfterValidator(_positive)]
Duration = Annotated[str, AfterValidator(_duration)]
Quantity = Annotated[str, AfterValidator(_quantity)]
Size = Annotated[str, AfterValidator(_size)]


def _bytes(quantity: str) -> int:
    return int(units.parse_quantity(quantity))


def format_bytes(amount: int) -> str:
    """A byte count as a quantity in the largest binary unit that holds it exactly (``20Ti``, ``1800Gi``)."""
    for suffix, size in _BINARY_UNITS:
        if amount and amount % size == 0:
            return f"{amount // size}{suffix}"
    return str(amount)


def format_rate(rate: Decimal) -> str:
    """The wire form of a rate: exactly 6 fraction digits (``"23.920000"``)."""
    return f"{rate.quantize(_MICRO, rounding=ROUND_HALF_UP):f}"


# --- the file's structure ----------------------------------------------------------------------


class _Entry(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=False, extra="forbid", frozen=True)


class RegionClass(_Entry):
    region: str = Field(pattern=_DNS_LABEL)
    price_factor: Rate


class AcceleratorEntry(_Entry):
    family: str = Field(min_length=1)
    memory: Quantity


class Boot(_Entry):
    p50: Duration
    p90: Duration

    @model_validator(mode="after")
    def _ordered(self) -> Boot:
        if units.parse_duration(self.p90) < units.parse_duration(self.p50):
            raise ValueError(f"p90 ({self.p90}) must not be shorter than p50 ({self.p50})")
        return self


class Interruptible(_Entry):
    price_factor: Rate
    mean_time_between_interruptions: Duration
    regions: list[RegionClassName] = Field(min_length=1)

    @model_validator(mode="after")
    def _discounted(self) -> Interruptible:
        if self.price_factor >= 1:
            raise ValueError(f"priceFactor ({self.price_factor}) must be below 1: an interruptible host costs less")
        return self


class PerGpu(_Entry):
    vcpu: int = Field(ge=1, strict=True)
    memory: Quantity
    disk: Quantity


class _Host(_Entry):
    regions: list[RegionClassName] = Field(min_length=1)
    boot: Boot
    interruptible: Interruptible | None = None


class GpuHost(_Host):
    accelerator: str = Field(min_length=1)
    interconnect: Literal["NVLink", "PCIe"]
    per_gpu: PerGpu
    sizes: dict[GpuCount, Rate] = Field(min_length=1)
    # The provider's machine type per GPU count (aws: g5.4xlarge, ...); a provider that needs none omits it.
    instance_types: dict[GpuCount, Annotated[str, Field(pattern=_INSTANCE_TYPE)]] | None = None
    # Attempts may share one host, each with its own GPUs, paying the rate for the GPUs they take (ADR 0048).
    shareable: bool = False


class CpuHost(_Host):
    vcpu: int = Field(ge=1, strict=True)
    memory: Quantity
    disk: Quantity
    rate: Rate
    instance_type: str | None = Field(None, pattern=_INSTANCE_TYPE)

    @property
    def shape(self) -> str:
        return f"cpu-{self.vcpu}c"


class StorageEntry(_Entry):
    rate_usd_per_gib_month: Rate = Field(alias="rateUSDPerGiBMonth")
    free_per_job: Size


class PlatformFeeEntry(_Entry):
    per_gpu_hour: Rate = Field(alias="perGPUHour")
    per_host_hour: Rate


class PriceBookFile(_Entry):
    version: str = Field(pattern=_LABEL_VALUE)
    currency: Literal["USD"]
    provider: str = Field(pattern=_DNS_LABEL)
    sources: str = Field(min_length=1)
    storage: StorageEntry
    region_classes: dict[RegionClassName, RegionClass] = Field(min_length=1)
    accelerators: dict[str, AcceleratorEntry] = Field(default_factory=dict)
    gpu_hosts: list[GpuHost] = Field(default_factory=list)
    cpu_hosts: list[CpuHost] = Field(default_factory=list)
    platform_fee: PlatformFeeEntry = Field(
        default_factory=lambda: PlatformFeeEntry.model_validate({"perGPUHour": "0.20", "perHostHour": "0.05"})
    )


# --- what a price book expands into ------------------------------------------------------------


@dataclass(frozen=True)
class Offering:
    """One offering, fully explicit: what a host is, where, and what an hour of it costs."""

    name: str
    accelerator: str | None
    family: str | None
    gpus: int
    gpu_memory: str | None
    interconnect: Literal["NVLink", "PCIe", "None"]
    vcpu: int
    memory: str
    disk: str
    provider: str
    region: str
    region_class: str
    interruptible: bool
    mean_time_between_interruptions: str | None
    rate: Decimal
    boot_p50: str
    boot_p90: str
    pricebook_version: str
    instance_type: str | None = None
    shareable: bool = False

    def spec(self) -> dict[str, Any]:
        """The Offering's ``spec`` as served (camelCase; absent fields omitted)."""
        spec: dict[str, Any] = {}
        if self.accelerator is not None:
            spec["accelerator"] = self.accelerator
            spec["family"] = self.family
        spec["gpus"] = self.gpus
        if self.gpu_memory is not None:
            spec["gpuMemory"] = self.gpu_memory
        spec.update(
            interconnect=self.interconnect,
            vcpu=self.vcpu,
            memory=self.memory,
            disk=self.disk,
            provider=self.provider,
            region=self.region,
            **({"instanceType": self.instance_type} if self.instance_type else {}),
            regionClass=self.region_class,
            interruptible=self.interruptible,
        )
        if self.mean_time_between_interruptions is not None:
            spec["meanTimeBetweenInterruptions"] = self.mean_time_between_interruptions
        spec["rateUSDPerHour"] = format_rate(self.rate)
        spec["boot"] = {"p50": self.boot_p50, "p90": self.boot_p90}
        spec["pricebookVersion"] = self.pricebook_version
        if self.shareable:
            spec["shareable"] = True
        return spec

    def body(self) -> dict[str, Any]:
        """The Offering object the API server stores (without server-set metadata)."""
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name, "labels": {VERSION_LABEL: self.pricebook_version}},
            "spec": self.spec(),
        }


@dataclass(frozen=True)
class PlatformFee:
    """What an hour on a Pool host costs: ``per_gpu_hour`` for each GPU an attempt takes, or ``per_host_hour``
    for one that takes none (USD)."""

    per_gpu_hour: Decimal
    per_host_hour: Decimal

    def wire(self) -> dict[str, str]:
        """As estimates and the docs show it: ``{"perGPUHour": "0.200000", "perHostHour": "0.050000"}``."""
        return {"perGPUHour": format_rate(self.per_gpu_hour), "perHostHour": format_rate(self.per_host_hour)}


@dataclass(frozen=True)
class StoragePrice:
    """What storing a Job's bytes costs: ``rate_per_gib_month`` USD per GiB (2^30 bytes) for a month of
    :data:`HOURS_PER_MONTH` hours, for the bytes above ``free_bytes`` (the free inclusion per Job)."""

    rate_per_gib_month: Decimal
    free_bytes: int

    def wire(self, version: str) -> dict[str, Any]:
        """The price as the ledger door serves it to the storage billing controller."""
        return {
            "pricebookVersion": version,
            "rateUSDPerGiBMonth": f"{self.rate_per_gib_month.normalize():f}",
            "freeBytes": self.free_bytes,
            "hoursPerMonth": HOURS_PER_MONTH,
        }


#: A month, for storage priced per GiB-month: 365 x 24 / 12 hours, as the clouds bill it.
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class PriceBook:
    version: str
    currency: str
    provider: str
    source: str
    offerings: tuple[Offering, ...]
    storage: StoragePrice
    platform_fee: PlatformFee = field(default_factory=lambda: PlatformFee(Decimal("0.20"), Decimal("0.05")))

    def by_name(self) -> dict[str, Offering]:
        return {offering.name: offering for offering in self.offerings}


# --- loading -----------------------------------------------------------------------------------


def load(path: Path | None, accelerators: Iterable[Accelerator]) -> PriceBook:
    """Read, validate and expand a price book file (None: the one shipped with Nodus).

    Raises :class:`PriceBookError` listing every problem.
    """
    if path is None or (str(path) in SHIPPED_BOOKS and not path.exists()):
        book = SHIPPED_BOOKS[str(path or "sim")]
        text = resources.files(__package__).joinpath(book).read_text(encoding="utf-8")
        return parse(
            text, SHIPPED if path is None else f"the shipped price book {path} (nodus/catalog/{book})", accelerators
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PriceBookError(str(path), [f"cannot be read: {exc}"]) from exc
    return parse(text, str(path), accelerators)


def parse(text: str, source: str, accelerators: Iterable[Accelerator]) -> PriceBook:
    """Validate and expand the text of a price book; ``source`` names it in errors."""
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise PriceBookError(source, [f"is not valid YAML: {exc}"]) from exc
    if not isinstance(raw, dict):
        raise PriceBookError(source, ["must be a YAML mapping with version, currency, regionClasses, ..."])
    try:
        book = PriceBookFile.model_validate(raw)
    except ValidationError as exc:
        raise PriceBookError(source, _problems(exc, raw)) from None
    problems = _check(book, {accelerator.id: accelerator for accelerator in accelerators})
    if problems:
        raise PriceBookError(source, problems)
    offerings = _expand(book)
    if not offerings:
        raise PriceBookError(source, ["describes no offerings: list hosts under gpuHosts or cpuHosts"])
    counts = Counter(offering.name for offering in offerings)
    duplicates = sorted(name for name, count in counts.items() if count > 1)
    if duplicates:
        raise PriceBookError(source, [f"offering {name} is described more than once" for name in duplicates])
    storage = StoragePrice(book.storage.rate_usd_per_gib_month, _bytes(book.storage.free_per_job))
    fee = PlatformFee(book.platform_fee.per_gpu_hour, book.platform_fee.per_host_hour)
    return PriceBook(book.version, book.currency, book.provider, source, tuple(offerings), storage, fee)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping (YAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _entry_name(section: Any, entry: Any) -> str:
    if not isinstance(entry, dict):
        return ""
    if section == "gpuHosts" and isinstance(entry.get("accelerator"), str):
        return str(entry["accelerator"])
    if section == "cpuHosts" and isinstance(entry.get("vcpu"), int):
        return f"cpu-{entry['vcpu']}c"
    return ""


def _where(loc: tuple[int | str, ...], raw: Any) -> str:
    """A pydantic location as a path through the file, naming host entries (``gpuHosts[2] (l4-24g).sizes``)."""
    text, node, section = "", raw, loc[0] if loc else None
    for part in loc:
        if part == "[key]":
            text += " (as a key)"
            continue
        if isinstance(node, list) and isinstance(part, int):
            node = node[part] if 0 <= part < len(node) else None
            name = _entry_name(section, node)
            text += f"[{part}]" + (f" ({name})" if name else "")
            continue
        text += f".{part}" if text else str(part)
        node = node.get(part) if isinstance(node, dict) else None
    return text or "the file"


def _problems(error: ValidationError, raw: Any) -> list[str]:
    problems = []
    for item in error.errors(include_url=False):
        loc = tuple(part for part in item["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        message = str(item["msg"]).removeprefix("Value error, ")
        value = item.get("input")
        if item["type"] == "missing":
            message = "is required"
        elif item["type"] == "extra_forbidden":
            message = "is not a price book field"
        elif not isinstance(value, dict | list) and f"{value!r}" not in message:
            message += f" (got {value!r})"
        problems.append(f"{_where(loc, raw)}: {message}")
    return problems


def _check(book: PriceBookFile, known: dict[str, Accelerator]) -> list[str]:
    """The rules that span entries: known accelerators, defined regions, interruptible regions offered."""
    problems = []
    for variant, entry in book.accelerators.items():
        where = f"accelerators.{variant}"
        accelerator = known.get(variant)
        if accelerator is None:
            problems.append(f"{where}: unknown accelerator id; known ids: {', '.join(sorted(known))}")
            continue
        if entry.family != accelerator.family:
            problems.append(f"{where}.family: {variant} is of family {accelerator.family}, not {entry.family}")
        if _bytes(entry.memory) != accelerator.memory_bytes:
            expected = format_bytes(accelerator.memory_bytes)
            problems.append(f"{where}.memory: {variant} has {expected} per GPU, not {entry.memory}")
    hosts: list[tuple[str, _Host]] = [
        (f"gpuHosts[{i}] ({host.accelerator})", host) for i, host in enumerate(book.gpu_hosts)
    ]
    hosts += [(f"cpuHosts[{i}] ({host.shape})", host) for i, host in enumerate(book.cpu_hosts)]
    for where, host in hosts:
        if isinstance(host, GpuHost) and host.accelerator not in book.accelerators:
            hint = "unknown accelerator id" if host.accelerator not in known else "not listed under accelerators"
            problems.append(f"{where}.accelerator: {hint}; the book lists: {', '.join(sorted(book.accelerators))}")
        problems += _instance_types(book.provider, where, host)
        for region_class in host.regions:
            if region_class not in book.region_classes:
                problems.append(f"{where}.regions: region class {region_class} is not defined under regionClasses")
        if host.interruptible is not None:
            for region_class in host.interruptible.regions:
                if region_class not in host.regions:
                    problems.append(
                        f"{where}.interruptible.regions: {region_class} is not among the host's regions "
                        f"({', '.join(host.regions)})"
                    )
    return problems


def _instance_types(provider: str, where: str, host: _Host) -> list[str]:
    """A host entry names a machine type for each of its sizes, or none at all; an aws book's always do (they are
    what its provider starts)."""
    if isinstance(host, GpuHost):
        if host.instance_types is None:
            return [f"{where}.instanceTypes: required by provider aws (one per size)"] if provider == "aws" else []
        sizes, named = set(host.sizes), set(host.instance_types)
        if sizes != named:
            wanted = ", ".join(str(n) for n in sorted(sizes))
            return [f"{where}.instanceTypes: must name one instance type per size ({wanted}), not for {sorted(named)}"]
    elif isinstance(host, CpuHost) and host.instance_type is None and provider == "aws":
        return [f"{where}.instanceType: required by provider aws"]
    return []


def _expand(book: PriceBookFile) -> list[Offering]:
    offerings: list[Offering] = []
    for gpu_host in book.gpu_hosts:
        accelerator = book.accelerators[gpu_host.accelerator]
        for gpus, rate in sorted(gpu_host.sizes.items()):
            shape = Offering(
                name=f"{gpu_host.accelerator}-x{gpus}",
                accelerator=gpu_host.accelerator,
                family=accelerator.family,
                gpus=gpus,
                gpu_memory=format_bytes(_bytes(accelerator.memory)),
                interconnect=gpu_host.interconnect,
                vcpu=gpu_host.per_gpu.vcpu * gpus,
                memory=format_bytes(_bytes(gpu_host.per_gpu.memory) * gpus),
                disk=format_bytes(_bytes(gpu_host.per_gpu.disk) * gpus),
                provider=book.provider,
                region="",
                region_class="",
                interruptible=False,
                mean_time_between_interruptions=None,
                rate=rate,
                boot_p50=gpu_host.boot.p50,
                boot_p90=gpu_host.boot.p90,
                pricebook_version=book.version,
                instance_type=(gpu_host.instance_types or {}).get(gpus),
                shareable=gpu_host.shareable,
            )
            offerings += _placed(book, gpu_host, shape)
    for cpu_host in book.cpu_hosts:
        shape = Offering(
            name=cpu_host.shape,
            accelerator=None,
            family=None,
            gpus=0,
            gpu_memory=None,
            interconnect="None",
            vcpu=cpu_host.vcpu,
            memory=format_bytes(_bytes(cpu_host.memory)),
            disk=format_bytes(_bytes(cpu_host.disk)),
            provider=book.provider,
            region="",
            region_class="",
            interruptible=False,
            mean_time_between_interruptions=None,
            rate=cpu_host.rate,
            boot_p50=cpu_host.boot.p50,
            boot_p90=cpu_host.boot.p90,
            pricebook_version=book.version,
            instance_type=cpu_host.instance_type,
        )
        offerings += _placed(book, cpu_host, shape)
    return offerings


def _placed(book: PriceBookFile, host: _Host, shape: Offering) -> list[Offering]:
    """A host shape in each of its region classes, on demand and, where offered, interruptible."""
    out = []
    for region_class in host.regions:
        region = book.region_classes[region_class]
        rate = shape.rate * region.price_factor
        out.append(_at(shape, region.region, region_class, rate))
    if host.interruptible is not None:
        spot = host.interruptible
        for region_class in spot.regions:
            region = book.region_classes[region_class]
            rate = shape.rate * region.price_factor * spot.price_factor
            placed = _at(shape, region.region, region_class, rate)
            out.append(
                dataclasses.replace(
                    placed,
                    name=f"{placed.name}-spot",
                    interruptible=True,
                    mean_time_between_interruptions=spot.mean_time_between_interruptions,
                )
            )
    return out


def _at(shape: Offering, region: str, region_class: str, rate: Decimal) -> Offering:
    return dataclasses.replace(
        shape,
        name=f"{shape.name}-{region_class}",
        region=region,
        region_class=region_class,
        rate=rate.quantize(_MICRO, rounding=ROUND_HALF_UP),
    )
