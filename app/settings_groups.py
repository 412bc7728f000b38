"""The service's settings by concern, one class each; `app.config.Settings` is all of them
together, read from `SPEEDWATCH_*` environment variables (a field's variable is its name in
capitals: `db_pool_size` is SPEEDWATCH_DB_POOL_SIZE). A class here only declares and checks
its own fields; rules across groups (production's refusals, admission's defaults from the
pool) live on Settings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

# Package names (PEP 503 normalised) a trigger may pin; anything else is refused at the API
# and again at the worker, so a CI token cannot make a worker install arbitrary code.
DEFAULT_ENV_ALLOWLIST = [
    "torch",
    "torchvision",
    "torch-tensorrt",
    "tensorrt",
    "tensorrt-cu12",
    "tensorrt-cu12-bindings",
    "tensorrt-cu12-libs",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxscript",
    "numpy",
]


Executor = Literal["local", "celery", "none"]


class Webhook(BaseModel):
    """Where regression events are posted: a generic JSON payload or a Slack-style text."""

    url: str = Field(pattern=r"^https?://")
    kind: Literal["json", "slack"] = "json"


class ServingSettings(BaseModel):
    """The API process: where it listens, who may read, how it is reached."""

    environment: Literal["development", "production"] = "development"
    # `speedwatch serve`
    host: str = "127.0.0.1"
    port: int = 8000
    # The address users reach this server by (https://speedwatch.example.com): what a repro
    # bundle's README names as the server that stored the result, and an origin the pages'
    # sign-in accepts besides the request's own host. Never taken from a request's Host
    # header, which the client writes. None: the README names no address.
    public_url: str | None = Field(default=None, max_length=300,
                                   pattern=r"^https?://[^\s/?#@]+(/[^\s?#]*)?$")
    # True: GET endpoints answer without a token; False: they need a token with `read` scope.
    public_reads: bool = True
    # A bearer token for `/metrics` alone, checked against this setting without the
    # database: with private reads a scrape with a store-held `read` token fails (503) during
    # a database outage, just when metrics matter. At least 16 characters; None: only `read`
    # tokens (or public reads) open `/metrics`.
    metrics_token: SecretStr | None = None

    @field_validator("metrics_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters (a guessable scrape token "
                             "would open the run counts to anyone)")
        return value


class AdmissionSettings(BaseModel):
    """What one API process takes in at once, and how long it waits for a body."""

    # Admission (app.api.admission): requests in flight per process, per verified identity
    # (a token of every project; the tokens of a project together), and of every request
    # with no verified token together (anonymous reads, the pages' sign-out, tokens that
    # name nothing); beyond them a request waits up to admission_wait_seconds, then 429
    # with Retry-After. Unset: two connections in three of the pool (pool_size + 2 x
    # pool_size overflow), half of that per identity, a fifth for the anonymous (at least
    # 1), so an admitted request always gets a connection and strangers never fill it.
    max_requests_in_flight: int | None = Field(default=None, ge=1, le=10_000)
    max_requests_per_client: int | None = Field(default=None, ge=1, le=10_000)
    max_anonymous_requests_in_flight: int | None = Field(default=None, ge=1, le=10_000)
    admission_wait_seconds: float = Field(default=2.0, ge=0, le=60)
    # a request's whole body must arrive within this long of its start (else 408)
    body_read_timeout_seconds: float = Field(default=15.0, gt=0, le=600)
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)


class StoreSettings(BaseModel):
    """The database: where it is, and how long a connection or a statement may take."""

    database_url: str = "sqlite:///./var/speedwatch.db"
    # Database connection behaviour: an unreachable or stuck database must become a 503
    # within seconds, not a request that hangs until the client gives up.
    db_connect_timeout_seconds: int = Field(default=5, ge=1)
    db_statement_timeout_ms: int = Field(default=15_000, ge=100)
    db_pool_size: int = Field(default=5, ge=1)


class QueueSettings(BaseModel):
    """How cells and other work reach workers: the executor, the broker, the queues."""

    # local: in-process thread pool (the embedded default); celery: Redis broker + workers;
    # none: record only -- runs and cells are stored but never executed (API tests, a
    # read-only replica, or an API whose workers are enqueued by someone else).
    executor: Executor = "local"
    broker_url: str = "redis://127.0.0.1:6379/0"
    cpu_queue: str = "cpu"
    # device (as given in a run's matrix) -> Celery queue. "cuda" means "any GPU"; add
    # per-class entries such as {"nvidia-h100": "gpu-h100"} to route by GPU model.
    gpu_queues: dict[str, str] = Field(default_factory=lambda: {"cuda": "gpu"})
    # Deliveries have a queue of their own, consumed by its own worker
    # (`speedwatch worker --queues webhooks`): a receiver that is slow or down then holds
    # up other deliveries at worst, never a benchmark cell waiting for a worker.
    webhook_queue: str = "webhooks"
    # Beat's reconciler sweeps have a queue of their own too (consumed beside the webhooks
    # by default, `speedwatch worker --queues webhooks,maintenance`): behind benchmark cells
    # on `cpu` they piled up during an outage and ran long after it ended.
    maintenance_queue: str = "maintenance"
    # Redis re-delivers a message its worker never acknowledged (the worker was SIGKILLed,
    # its host died) after this long. None: derived from the task time limits, so that a
    # cell still running is never handed to a second worker. Lower it only when every cell
    # is known to finish sooner (tests): a cell that outlives it is run twice at once.
    broker_visibility_timeout_seconds: int | None = Field(default=None, ge=1)
    # Cells sent to one queue together (a run's cells) are measured together by one
    # worker, one child process of each in turn, so a drift of the machine reaches all of
    # them alike (workers.execution.execute_cells); at most this many per group (1: one cell
    # at a time, as separate messages). A group holds one worker for all its cells: on a
    # queue served by several GPUs, a smaller group spreads a run over more of them.
    interleave_cells: int = Field(default=16, ge=1, le=64)

    def queue_for_device(self, device: str) -> str:
        """The Celery queue that runs cells for `device` ("cpu", "cuda" or a GPU class)."""
        if device == "cpu":
            return self.cpu_queue
        if device in self.gpu_queues:
            return self.gpu_queues[device]
        raise KeyError(device)

    def devices(self) -> list[str]:
        """Every device a run may ask for: cpu plus the keys of gpu_queues."""
        return ["cpu", *sorted(self.gpu_queues)]

    def queue_names(self) -> list[str]:
        """All queues, for workers and the Celery app to declare explicitly."""
        return sorted({self.cpu_queue, self.webhook_queue, self.maintenance_queue,
                       *self.gpu_queues.values()})


class EnvironmentSettings(BaseModel):
    """What a run may install or name: pins, interpreters, the venv cache, users' models."""

    env_allowlist: list[str] = Field(default_factory=lambda: list(DEFAULT_ENV_ALLOWLIST))
    # Named interpreters a worker may run cells in: {"trt-2.7": "/opt/trt27/bin/python"}.
    interpreters: dict[str, str] = Field(default_factory=dict)
    venv_cache_dir: Path = Path("./var/venvs")
    # Disk budget of the cached environments of one worker host: after a build, the least
    # recently used are deleted until the cache fits (never one a cell is measuring in).
    # 0: no budget. An onnxruntime environment here is about 100 MB; one that had to
    # install its own torch, several GB.
    venv_cache_max_bytes: int = Field(default=20 * 1024**3, ge=0)
    # Models of the user's (benchmarks.model_ref). `package.module:factory` is accepted only
    # for these top-level packages (JSON list; ["*"]: any, for a single-user host): the
    # factory is imported and called on the worker. model_path: directories, separated by
    # ":" like PYTHONPATH, that each cell's child appends to sys.path (for those packages)
    # and searches, in order, for `file:PATH.pt2` archives. Set both on the API and on the
    # workers (the API checks the package, the worker checks it again and imports it).
    model_packages: list[str] = Field(default_factory=list)
    model_path: str = ""

    @field_validator("model_packages")
    @classmethod
    def _check_model_packages(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if p != "*" and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a top-level package name (or \"*\" for any)")
        return value


class WorkerSettings(BaseModel):
    """How long a cell may take and how often it runs again, how workers announce
    themselves, and the reconciler."""

    cell_timeout_seconds: int = Field(default=1800, ge=10)
    max_cell_attempts: int = Field(default=3, ge=1)
    reconcile_after_seconds: int = Field(default=3600, ge=10)
    # How often beat runs the reconciler; None: a quarter of reconcile_after_seconds, at
    # least 15 s.
    reconcile_interval_seconds: float | None = Field(default=None, gt=0)
    # Workers write their own row (queues, host, GPUs, interpreters) at start and every
    # this many seconds; one silent for `worker_lost_after_seconds` (None: 3 heartbeats
    # plus 30 s) counts as lost. The reconciler fails a sent cell for "no worker consumes
    # queue X" only when no worker of X was alive for `reconcile_after_seconds *
    # max_cell_attempts`; a cell the broker never took is sent when it is back, however long.
    worker_heartbeat_seconds: float = Field(default=30.0, gt=0, le=3600)
    worker_lost_after_seconds: float | None = Field(default=None, gt=0)
    # Workers not heard from for this long leave the list (and stop counting as announcing
    # their interpreters); the reconciler deletes their rows.
    worker_forget_seconds: float = Field(default=7 * 24 * 3600.0, gt=0)
    # A GPU worker pinned to one device waits this long for a foreign process on it to
    # leave before a cell; past that the cell is measured again later (workers.exclusivity).
    gpu_idle_wait_seconds: float = Field(default=30.0, ge=0, le=3600)

    def worker_lost_after(self) -> float:
        """Seconds of silence after which a worker counts as lost."""
        if self.worker_lost_after_seconds is not None:
            return self.worker_lost_after_seconds
        return 3 * self.worker_heartbeat_seconds + 30.0


class RunSettings(BaseModel):
    """What a run may ask for, and how its results are judged and confirmed."""

    max_matrix_cells: int = Field(default=256, ge=1)
    # A sweep triggers one run per release in its range (each builds a venv and measures
    # for a minute or more); a request may ask for fewer, never more.
    sweep_max_versions: int = Field(default=40, ge=1, le=1000)
    # A bisect measures one run per step, the good and bad environments included.
    bisect_max_steps: int = Field(default=16, ge=2, le=1000)
    # The CPU twin (benchmarks.host): a CPU cell's unit timed while other processes kept
    # more than this many cores busy is measured again (twice at most) and a load that
    # stays is stored with the result and named in its verdict. A request's
    # matrix.timing.max_host_load overrides it.
    max_host_load: float = Field(default=0.5, gt=0, le=4096)
    # Ingested results are judged after the response, coalesced per run over this window:
    # a CI job posting a matrix result by result gets one judging pass, not one per POST
    # (each pass costs a bootstrap and competes with the next request). 0 = judge each
    # ingest right after its response.
    ingest_judge_delay_seconds: float = Field(default=0.5, ge=0, le=60)
    # Who judges an ingested run: "api", this process, after the response (it shares the
    # API's cores with the next uploads), or "worker": with the Celery executor the run id
    # goes to the maintenance queue and a worker consuming it judges (the API judges
    # itself when the broker does not take it; the reconciler's sweep catches the rest).
    ingest_judging: Literal["api", "worker"] = "api"
    # A GPU regression is confirmed on this many GPUs of its class at once where that many
    # workers of its queue are alive (the GPU that measured it first): two GPUs of one class
    # differ by a few tenths of a percent, and one GPU's confirmation cannot tell a release
    # that is slower from a device that is. 1: one confirmation, wherever the queue sends it.
    confirm_gpus: int = Field(default=2, ge=1, le=16)


class WebhookSettings(BaseModel):
    """Where regression events are delivered, and how deliveries are retried."""

    # Regression notifications (JSON list, e.g. [{"url": "https://...", "kind": "slack"}]):
    # each event is one delivery per webhook, retried with exponential backoff
    # (backoff * 2**attempt seconds, capped) on connection errors and 5xx answers.
    webhooks: list[Webhook] = Field(default_factory=list)
    webhook_max_retries: int = Field(default=5, ge=0, le=20)
    webhook_backoff_seconds: float = Field(default=2.0, ge=0)
    webhook_backoff_max_seconds: float = Field(default=300.0, ge=0)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
