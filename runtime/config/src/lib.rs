//! The one table of the configuration keys Floe reads: a FlinkJob's `spec.configuration`, a
//! submitted job's configuration, a process's `-D` properties. Flink users bring configuration
//! they have; a key Floe does not read must not be ignored in silence, since a misspelled
//! `execution.checkpointing.intervall` runs a job without checkpoints. [`check`] reports every key
//! the table does not have: a Flink key Floe does not implement says so and what to use instead,
//! any other names the nearest known key. `floe run`, the JobManager and the operator report what
//! it finds as warnings (a job may still carry keys of its own).
//!
//! The table is also the documentation (`floe config`, [`markdown`]): a test reads the sources
//! for key literals, so a key read in the code and missing here fails it.

use std::collections::BTreeMap;

/// Who acts on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The job: its JobManager and the job's tasks (the job's configuration).
    Job,
    /// A Floe process (JobManager or TaskManager) from its own `-D` properties; the operator and
    /// `floe run` pass a job's keys of this kind to its processes ([`process_properties`]).
    Process,
    /// The Kubernetes operator, from the FlinkJob's `spec.configuration`.
    Operator,
}

impl std::fmt::Display for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reader::Job => "job",
            Reader::Process => "process",
            Reader::Operator => "operator",
        })
    }
}

/// One configuration key Floe reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub name: &'static str,
    /// What it takes, as the code parses it.
    pub value: &'static str,
    /// What applies when it is not set.
    pub default: &'static str,
    pub read_by: &'static [Reader],
    pub doc: &'static str,
}

/// Every key Floe reads.
pub const KEYS: &[Key] = &[
    Key {
        name: "execution.runtime-mode",
        value: "enum(STREAMING|BATCH|AUTOMATIC)",
        default: "STREAMING",
        read_by: &[Reader::Job],
        doc: "Batch or streaming execution (AUTOMATIC = STREAMING); a manifest sets it from spec.job.mode",
    },
    Key {
        name: "parallelism.default",
        value: "integer (or -1/auto)",
        default: "1",
        read_by: &[Reader::Job],
        doc: "Default parallelism; -1/auto: adaptive batch scheduler decides (set from spec.job.parallelism)",
    },
    Key {
        name: "pipeline.max-parallelism",
        value: "integer",
        default: "derived from parallelism (1.5x, power of 2, 128..32768)",
        read_by: &[Reader::Job],
        doc: "Number of key groups: the upper bound for rescaling keyed state",
    },
    Key {
        name: "execution.batch-shuffle-mode",
        value: "enum(ALL_EXCHANGES_BLOCKING|FORWARD_EXCHANGES_PIPELINED|POINTWISE_EXCHANGES_PIPELINED|ALL_EXCHANGES_PIPELINED)",
        default: "ALL_EXCHANGES_BLOCKING",
        read_by: &[Reader::Job, Reader::Operator],
        doc: "Which exchanges of a BATCH job are pipelined rather than blocking (operator validates it)",
    },
    Key {
        name: "execution.buffer-timeout",
        value: "integer (ms; -1 = only full buffers)",
        default: "100",
        read_by: &[Reader::Job],
        doc: "Longest an output buffer waits before it is flushed; 0 flushes every record",
    },
    Key {
        name: "taskmanager.memory.segment-size",
        value: "size",
        default: "32kb",
        read_by: &[Reader::Job],
        doc: "Size of the network/shuffle buffers records are cut into",
    },
    Key {
        name: "pipeline.auto-watermark-interval",
        value: "duration",
        default: "200 ms",
        read_by: &[Reader::Job],
        doc: "How often watermarks are emitted and processing-time timers are checked",
    },
    Key {
        name: "execution.checkpointing.interval",
        value: "duration",
        default: "none (no checkpoints; 0 = off)",
        read_by: &[Reader::Job, Reader::Operator],
        doc: "Turns on periodic aligned checkpoints of a STREAMING job (needs job storage)",
    },
    Key {
        name: "execution.checkpointing.num-retained",
        value: "integer",
        default: "1",
        read_by: &[Reader::Job],
        doc: "How many completed checkpoints are kept in job storage",
    },
    Key {
        name: "execution.checkpointing.timeout",
        value: "duration",
        default: "10 min",
        read_by: &[Reader::Job],
        doc: "A checkpoint (or savepoint) not completed within this time is aborted",
    },
    Key {
        name: "state.backend.type",
        value: "enum(hashmap|heap|rocksdb)",
        default: "hashmap",
        read_by: &[Reader::Job],
        doc: "Keyed state backend: heap objects with full snapshots, or RocksDB with incremental ones",
    },
    Key {
        name: "restart-strategy.type",
        value: "enum(fixed-delay|exponential-delay|failure-rate|none)",
        default: "exponential-delay if the job checkpoints, else fixed-delay (or the strategy whose keys are set)",
        read_by: &[Reader::Job],
        doc: "Which restart strategy handles task failures (aliases: off/disable = none, fixeddelay, ...)",
    },
    Key {
        name: "restart-strategy.fixed-delay.attempts",
        value: "integer",
        default: "3",
        read_by: &[Reader::Job],
        doc: "Restarts allowed over the job's whole life before it fails",
    },
    Key {
        name: "restart-strategy.fixed-delay.delay",
        value: "duration",
        default: "1 s",
        read_by: &[Reader::Job],
        doc: "Wait before each fixed-delay restart",
    },
    Key {
        name: "restart-strategy.exponential-delay.initial-backoff",
        value: "duration",
        default: "1 s",
        read_by: &[Reader::Job],
        doc: "Delay before the first exponential-delay restart",
    },
    Key {
        name: "restart-strategy.exponential-delay.max-backoff",
        value: "duration",
        default: "1 min",
        read_by: &[Reader::Job],
        doc: "Longest exponential-delay restart delay (must be >= initial-backoff)",
    },
    Key {
        name: "restart-strategy.exponential-delay.backoff-multiplier",
        value: "float",
        default: "1.5",
        read_by: &[Reader::Job],
        doc: "Each restart waits this many times longer than the previous one (must be > 1)",
    },
    Key {
        name: "restart-strategy.exponential-delay.reset-backoff-threshold",
        value: "duration",
        default: "1 h",
        read_by: &[Reader::Job],
        doc: "Running this long without failure resets the backoff to initial-backoff",
    },
    Key {
        name: "restart-strategy.exponential-delay.jitter-factor",
        value: "float",
        default: "0.1",
        read_by: &[Reader::Job],
        doc: "Random variation of each delay, as a fraction of it (0 to 1)",
    },
    Key {
        name: "restart-strategy.exponential-delay.attempts-before-reset-backoff",
        value: "integer",
        default: "none (unlimited)",
        read_by: &[Reader::Job],
        doc: "Job fails after this many restarts without a backoff reset",
    },
    Key {
        name: "restart-strategy.failure-rate.max-failures-per-interval",
        value: "integer",
        default: "1",
        read_by: &[Reader::Job],
        doc: "Job fails when more failures than this happen within the interval",
    },
    Key {
        name: "restart-strategy.failure-rate.failure-rate-interval",
        value: "duration",
        default: "1 min",
        read_by: &[Reader::Job],
        doc: "Window in which failures are counted for the failure-rate strategy",
    },
    Key {
        name: "restart-strategy.failure-rate.delay",
        value: "duration",
        default: "1 s",
        read_by: &[Reader::Job],
        doc: "Wait before each failure-rate restart",
    },
    Key {
        name: "slot.request.timeout",
        value: "duration",
        default: "JobManager's --slot-request-timeout-s (60 s; 600 s in operator pods); 60 s on restarts",
        read_by: &[Reader::Job],
        doc: "How long a job waits for its slots before failing with NoResourceAvailableException",
    },
    Key {
        name: "heartbeat.timeout",
        value: "duration",
        default: "10 s",
        read_by: &[Reader::Process, Reader::Job],
        doc: "TaskManager silence before it counts as lost; applied only by floe run, jobs just validate it",
    },
    Key {
        name: "jobmanager.scheduler",
        value: "enum(default|adaptive|adaptivebatch|adaptive-batch)",
        default: "default",
        read_by: &[Reader::Job, Reader::Operator],
        doc: "adaptive = run at the parallelism free slots allow and rescale (needs checkpoints)",
    },
    Key {
        name: "jobmanager.adaptive-scheduler.min-parallelism-increase",
        value: "integer",
        default: "1",
        read_by: &[Reader::Job],
        doc: "Adaptive scheduler scales up only by at least this much",
    },
    Key {
        name: "jobmanager.adaptive-scheduler.scaling-interval.min",
        value: "duration",
        default: "30 s",
        read_by: &[Reader::Job],
        doc: "Minimum time between two adaptive rescales",
    },
    Key {
        name: "jobmanager.adaptive-scheduler.resource-stabilization-timeout",
        value: "duration",
        default: "10 s",
        read_by: &[Reader::Job],
        doc: "How long a job short of slots waits before starting with fewer",
    },
    Key {
        name: "execution.batch.adaptive.auto-parallelism.min-parallelism",
        value: "integer",
        default: "1",
        read_by: &[Reader::Job],
        doc: "Lowest parallelism the adaptive batch scheduler decides",
    },
    Key {
        name: "execution.batch.adaptive.auto-parallelism.max-parallelism",
        value: "integer",
        default: "128",
        read_by: &[Reader::Job],
        doc: "Highest decided parallelism; also the key groups of vertices decided at run time",
    },
    Key {
        name: "execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task",
        value: "size",
        default: "16 MiB",
        read_by: &[Reader::Job],
        doc: "Target bytes per subtask when parallelism is decided from input size",
    },
    Key {
        name: "execution.batch.adaptive.auto-parallelism.default-source-parallelism",
        value: "integer",
        default: "none (= max-parallelism)",
        read_by: &[Reader::Job],
        doc: "Source parallelism when its input size is unknown, and cap of an inferred one",
    },
    Key {
        name: "job.autoscaler.enabled",
        value: "bool",
        default: "false",
        read_by: &[Reader::Job, Reader::Operator],
        doc: "Runs the job autoscaler in the JobManager (needs jobmanager.scheduler: adaptive)",
    },
    Key {
        name: "job.autoscaler.stabilization.interval",
        value: "duration",
        default: "5 min",
        read_by: &[Reader::Job],
        doc: "No metrics are collected this long after a (re)start",
    },
    Key {
        name: "job.autoscaler.metrics.window",
        value: "duration",
        default: "15 min",
        read_by: &[Reader::Job],
        doc: "Window over which processing rates are averaged",
    },
    Key {
        name: "job.autoscaler.scale-down.interval",
        value: "duration",
        default: "1 h",
        read_by: &[Reader::Job],
        doc: "How long a scale-down decision is held back",
    },
    Key {
        name: "job.autoscaler.catch-up.duration",
        value: "duration",
        default: "30 min",
        read_by: &[Reader::Job],
        doc: "Time within which pending (lagging) records should be caught up",
    },
    Key {
        name: "job.autoscaler.restart.time",
        value: "duration",
        default: "5 min",
        read_by: &[Reader::Job],
        doc: "Assumed cost of a rescale, added to the catch-up",
    },
    Key {
        name: "job.autoscaler.target.utilization",
        value: "float",
        default: "0.7",
        read_by: &[Reader::Job],
        doc: "Target busy fraction of each vertex (0.01 to 1)",
    },
    Key {
        name: "job.autoscaler.target.utilization.boundary",
        value: "float",
        default: "0.3",
        read_by: &[Reader::Job],
        doc: "Tolerance around the target utilization before rescaling (0 to 1)",
    },
    Key {
        name: "job.autoscaler.scale-up.max-factor",
        value: "float",
        default: "100000",
        read_by: &[Reader::Job],
        doc: "Largest factor a single scale-up may multiply parallelism by",
    },
    Key {
        name: "job.autoscaler.scale-down.max-factor",
        value: "float",
        default: "0.6",
        read_by: &[Reader::Job],
        doc: "Largest fraction a single scale-down may remove (0 to 1)",
    },
    Key {
        name: "job.autoscaler.metrics.busy-time.aggregator",
        value: "enum(MAX|AVG|MIN)",
        default: "MAX",
        read_by: &[Reader::Job],
        doc: "How subtasks' busy times combine into the vertex's",
    },
    Key {
        name: "job.autoscaler.vertex.min-parallelism",
        value: "integer",
        default: "1",
        read_by: &[Reader::Job],
        doc: "Lowest parallelism the autoscaler gives a vertex",
    },
    Key {
        name: "job.autoscaler.vertex.max-parallelism",
        value: "integer",
        default: "200",
        read_by: &[Reader::Job],
        doc: "Highest parallelism the autoscaler gives a vertex",
    },
    Key {
        name: "state.savepoints.dir",
        value: "url (or plain local path)",
        default: "none (then {job storage}/savepoints)",
        read_by: &[Reader::Job, Reader::Operator],
        doc: "Default savepoint directory; operator validates it is s3:// or on the storage PVC",
    },
    Key {
        name: "execution.state-recovery.path",
        value: "url",
        default: "none",
        read_by: &[Reader::Job, Reader::Process],
        doc: "Savepoint or retained checkpoint the job starts from (the operator writes it on upgrades)",
    },
    Key {
        name: "execution.savepoint.path",
        value: "url",
        default: "none",
        read_by: &[Reader::Job],
        doc: "Flink 1 name of execution.state-recovery.path, used when that is unset",
    },
    Key {
        name: "execution.state-recovery.ignore-unclaimed-state",
        value: "bool",
        default: "false",
        read_by: &[Reader::Job],
        doc: "Start although the savepoint has state of operators the job no longer has",
    },
    Key {
        name: "execution.savepoint.ignore-unclaimed-state",
        value: "bool",
        default: "false",
        read_by: &[Reader::Job],
        doc: "Flink 1 name of execution.state-recovery.ignore-unclaimed-state (used when that is unset)",
    },
    Key {
        name: "floe.job-storage.url",
        value: "url (file://, s3://, memory://)",
        default: "none (set from spec.storage.url/{namespace}/{name})",
        read_by: &[Reader::Job, Reader::Process],
        doc: "Job storage for checkpoints, operation log, remote shuffle and default savepoints",
    },
    Key {
        name: "s3.endpoint",
        value: "url",
        default: "env AWS_ENDPOINT_URL or S3_ENDPOINT, else AWS's",
        read_by: &[Reader::Job, Reader::Process],
        doc: "S3 endpoint for s3:// storage URLs",
    },
    Key {
        name: "s3.region",
        value: "string",
        default: "env AWS_REGION or AWS_DEFAULT_REGION, else us-east-1",
        read_by: &[Reader::Job, Reader::Process],
        doc: "S3 region",
    },
    Key {
        name: "s3.access-key",
        value: "string",
        default: "env AWS_ACCESS_KEY_ID",
        read_by: &[Reader::Job, Reader::Process],
        doc: "S3 access key id",
    },
    Key {
        name: "s3.secret-key",
        value: "string",
        default: "env AWS_SECRET_ACCESS_KEY",
        read_by: &[Reader::Job, Reader::Process],
        doc: "S3 secret access key",
    },
    Key {
        name: "s3.session-token",
        value: "string",
        default: "env AWS_SESSION_TOKEN",
        read_by: &[Reader::Job, Reader::Process],
        doc: "S3 session token for temporary credentials",
    },
    Key {
        name: "floe.storage.part-timeout-ms",
        value: "integer (ms)",
        default: "30000",
        read_by: &[Reader::Job, Reader::Process],
        doc: "Deadline of one 8 MiB part of a streamed upload/read; a slow part is retried",
    },
    Key {
        name: "shuffle.remote.enabled",
        value: "bool",
        default: "false",
        read_by: &[Reader::Job],
        doc: "Puts blocking shuffle partitions in job storage so they survive a lost TaskManager",
    },
    Key {
        name: "floe.testing.object-store.failure-rate",
        value: "float",
        default: "0",
        read_by: &[Reader::Job, Reader::Process],
        doc: "Test fault injection: share (0-1) of object-store operations that fail",
    },
    Key {
        name: "floe.testing.object-store.ambiguous-rate",
        value: "float",
        default: "0",
        read_by: &[Reader::Job, Reader::Process],
        doc: "Test fault injection: share of failed writes that still took effect",
    },
    Key {
        name: "floe.testing.object-store.max-delay-ms",
        value: "integer (ms)",
        default: "0",
        read_by: &[Reader::Job, Reader::Process],
        doc: "Test fault injection: largest random delay added to an operation",
    },
    Key {
        name: "floe.testing.object-store.seed",
        value: "integer",
        default: "0",
        read_by: &[Reader::Job, Reader::Process],
        doc: "Test fault injection: seed of the fault sequence",
    },
    Key {
        name: "floe.internal.superseded-runs",
        value: "string (comma-separated job ids)",
        default: "none",
        read_by: &[Reader::Job],
        doc: "Internal, set by the JobManager: earlier runs without a checkpoint whose sink files are removed",
    },
    Key {
        name: "floe.internal.runs-latest-checkpoint",
        value: "string ({run}:{checkpoint},...)",
        default: "none",
        read_by: &[Reader::Job],
        doc: "Internal, set by the JobManager: latest checkpoint of each earlier run, for sink cleanup",
    },
    Key {
        name: "high-availability.kubernetes.leader-election.retry-period",
        value: "duration",
        default: "5 s",
        read_by: &[Reader::Process],
        doc: "How often a leading application-mode JobManager checks it was not fenced",
    },
    Key {
        name: "taskmanager.memory.managed.size",
        value: "size",
        default: "none",
        read_by: &[Reader::Process],
        doc: "Managed memory budget shared by the TaskManager's RocksDB instances (passed to the TaskManagers)",
    },
    Key {
        name: "taskmanager.memory.managed.fraction",
        value: "float",
        default: "0.4",
        read_by: &[Reader::Process],
        doc: "Share of the process size used as managed memory when no size is set (passed to the TaskManagers)",
    },
    Key {
        name: "taskmanager.memory.process.size",
        value: "size",
        default: "container (cgroup) memory limit; none = no budget",
        read_by: &[Reader::Process],
        doc: "Process size the managed fraction applies to (passed to the TaskManagers)",
    },
    Key {
        name: "state.backend.rocksdb.memory.managed",
        value: "bool",
        default: "true",
        read_by: &[Reader::Process],
        doc: "false turns off the shared RocksDB memory budget (passed to the TaskManagers)",
    },
    Key {
        name: "security.ssl.internal.enabled",
        value: "bool",
        default: "false",
        read_by: &[Reader::Process, Reader::Operator],
        doc: "Mutual TLS on internal gRPC (JobManager<->TaskManager, shuffle)",
    },
    Key {
        name: "security.ssl.internal.keystore",
        value: "string (PEM file path)",
        default: "none (required when enabled)",
        read_by: &[Reader::Process, Reader::Operator],
        doc: "PEM certificate (and key) of this process; operator checks it lies in a mounted Secret",
    },
    Key {
        name: "security.ssl.internal.key",
        value: "string (PEM file path)",
        default: "the keystore file",
        read_by: &[Reader::Process, Reader::Operator],
        doc: "PEM private key, when not in the keystore file",
    },
    Key {
        name: "security.ssl.internal.truststore",
        value: "string (PEM file path)",
        default: "none (required when enabled)",
        read_by: &[Reader::Process, Reader::Operator],
        doc: "PEM CA certificates peers' certificates must chain to",
    },
    Key {
        name: "security.ssl.internal.server-name",
        value: "string",
        default: "floe-internal",
        read_by: &[Reader::Process],
        doc: "Name every internal certificate carries and every connection verifies",
    },
    Key {
        name: "kubernetes.secrets",
        value: "string (name:/mount/path,...)",
        default: "none",
        read_by: &[Reader::Operator],
        doc: "Secrets mounted read-only into every pod of the job",
    },
    Key {
        name: "kubernetes.operator.deployment.rollback.enabled",
        value: "bool",
        default: "false",
        read_by: &[Reader::Operator],
        doc: "Roll an upgrade that does not become ready back to the last stable spec",
    },
    Key {
        name: "kubernetes.operator.deployment.readiness.timeout",
        value: "duration",
        default: "5 min",
        read_by: &[Reader::Operator],
        doc: "How long an upgraded deployment has to run its job before a rollback",
    },
    Key {
        name: "kubernetes.operator.periodic.savepoint.interval",
        value: "duration",
        default: "none (0 = never)",
        read_by: &[Reader::Operator],
        doc: "Operator takes a savepoint of the running job at this interval",
    },
    Key {
        name: "kubernetes.operator.jm-deployment.shutdown-ttl",
        value: "duration",
        default: "1 d",
        read_by: &[Reader::Operator],
        doc: "How long the JobManager of an ended job stays up before it is scaled to zero",
    },
    Key {
        name: "kubernetes.operator.savepoint.history.max.count",
        value: "integer",
        default: "10",
        read_by: &[Reader::Operator],
        doc: "How many completed savepoints the status history keeps",
    },
    Key {
        name: "kubernetes.operator.savepoint.history.max.age",
        value: "duration",
        default: "none (no limit)",
        read_by: &[Reader::Operator],
        doc: "Savepoints older than this leave the history",
    },
    Key {
        name: "kubernetes.operator.savepoint.cleanup.enabled",
        value: "bool",
        default: "true",
        read_by: &[Reader::Operator],
        doc: "Dispose of (delete) savepoints that leave the history, rather than just forget them",
    },
    Key {
        name: "kubernetes.operator.savepoint.dispose-on-delete",
        value: "bool",
        default: "false",
        read_by: &[Reader::Operator],
        doc: "Deleting the FlinkJob also disposes of the savepoints in its history",
    },
];

/// Keys of Apache Flink that Flink jobs commonly set and Floe does not implement, with what Floe
/// does instead.
pub const NOT_IMPLEMENTED: &[(&str, &str)] = &[
    (
        "heartbeat.interval",
        "only checked to be a duration: the interval is the JobManager's --heartbeat-interval-ms (1 s)",
    ),
    (
        "execution.checkpointing.mode",
        "checkpoints are always aligned exactly-once barriers; sinks pick their own guarantee (e.g. Kafka --delivery-guarantee)",
    ),
    (
        "execution.checkpointing.unaligned.enabled",
        "only aligned checkpoints; an aborted one sends a cancel marker; Flink 1's execution.checkpointing.unaligned is not read either",
    ),
    (
        "execution.checkpointing.aligned-checkpoint-timeout",
        "no unaligned checkpoints to switch to",
    ),
    (
        "execution.checkpointing.min-pause",
        "checkpoints are triggered by execution.checkpointing.interval only",
    ),
    (
        "execution.checkpointing.max-concurrent-checkpoints",
        "fixed at 1 (at most one pending checkpoint per job)",
    ),
    (
        "execution.checkpointing.tolerable-failed-checkpoints",
        "execution.checkpointing.timeout aborts a stuck checkpoint",
    ),
    (
        "execution.checkpointing.externalized-checkpoint-retention",
        "the last execution.checkpointing.num-retained checkpoints stay in job storage and can be restored via execution.state-recovery.path",
    ),
    (
        "state.checkpoints.dir",
        "checkpoints go to floe.job-storage.url (spec.storage.url)/checkpoints/{job-id}/; Flink 2's execution.checkpointing.dir is not read either",
    ),
    (
        "state.checkpoints.num-retained",
        "Flink 1's name: use execution.checkpointing.num-retained",
    ),
    (
        "execution.checkpointing.savepoint-dir",
        "Flink 2's name: use state.savepoints.dir (else {job storage}/savepoints)",
    ),
    (
        "state.backend",
        "Flink 1's name: use state.backend.type (hashmap|rocksdb)",
    ),
    (
        "state.backend.incremental",
        "rocksdb is always incremental, hashmap always full; execution.checkpointing.incremental is not read either",
    ),
    (
        "state.backend.local-recovery",
        "restores always download state from job storage",
    ),
    (
        "state.backend.rocksdb.localdir",
        "RocksDB files live under the TaskManager's --data-dir (state/{job}/...)",
    ),
    (
        "state.backend.rocksdb.predefined-options",
        "only the managed-memory budget applies; no other RocksDB tuning key (options-factory, ...) is read either",
    ),
    (
        "state.backend.rocksdb.memory.write-buffer-ratio",
        "Flink's defaults are built in; high-prio-pool-ratio is not read either",
    ),
    (
        "state.backend.rocksdb.timer-service.factory",
        "timers always live on the heap",
    ),
    (
        "execution.state-recovery.claim-mode",
        "always NO_CLAIM; Flink 1's execution.savepoint-restore-mode is not read either",
    ),
    (
        "taskmanager.numberOfTaskSlots",
        "use spec.taskManager.slots (floe taskmanager --slots)",
    ),
    (
        "jobmanager.memory.process.size",
        "set spec.jobManager.resources.memory",
    ),
    (
        "taskmanager.memory.flink.size",
        "there is no JVM: size the pods with spec.taskManager.resources",
    ),
    (
        "taskmanager.memory.network.fraction",
        "shuffle memory bounded by fixed credits x taskmanager.memory.segment-size; network.min and network.max are not read either",
    ),
    (
        "taskmanager.network.memory.buffers-per-channel",
        "fixed at 2 credits per channel (10 buffers per subpartition)",
    ),
    (
        "pipeline.name",
        "the job is named by spec.job.name / the FlinkJob's metadata.name",
    ),
    (
        "pipeline.operator-chaining.enabled",
        "only the API's disable_operator_chaining(); Flink 1's pipeline.operator-chaining is not read either",
    ),
    ("pipeline.object-reuse", "no equivalent"),
    (
        "pipeline.jars",
        "jobs are compiled into the binary and picked by spec.job.name; pipeline.classpaths is not read either",
    ),
    (
        "table.exec.state.ttl",
        "there is no Table/SQL API yet; a state descriptor takes its own time to live",
    ),
    (
        "high-availability.type",
        "HA via the operation log in job storage (spec.storage) with leader epochs; high-availability.storageDir is not read either",
    ),
    (
        "high-availability.kubernetes.leader-election.lease-duration",
        "only ...leader-election.retry-period is read; renew-deadline is not read either",
    ),
    (
        "kubernetes.jobmanager.replicas",
        "one JobManager replica; a replacement takes over from the operation log",
    ),
    ("jobmanager.execution.failover-strategy", "always region failover"),
    (
        "rest.port",
        "fixed 8081/6123 in pods; floe jobmanager --rest-address/--rpc-address; jobmanager.rpc.port is not read either",
    ),
    (
        "metrics.reporters",
        "JobManager serves /metrics on its REST port, TaskManagers on --metrics-address (9249); metrics.reporter.prom.* is not read either",
    ),
    ("web.checkpoints.history", "fixed at 10"),
    ("cluster.evenly-spread-out-slots", "no equivalent"),
    (
        "security.ssl.rest.enabled",
        "only internal TLS (security.ssl.internal.*); REST stays plain HTTP",
    ),
    (
        "s3.path.style.access",
        "only s3.endpoint, s3.region, s3.access-key, s3.secret-key, s3.session-token; fs.s3a.* is not read either",
    ),
    (
        "job.autoscaler.scaling.enabled",
        "job.autoscaler.enabled switches the whole autoscaler; job.autoscaler.memory.tuning.enabled is not read either",
    ),
    (
        "kubernetes.operator.job.upgrade.last-state-fallback.enabled",
        "savepoint upgrade mode always falls back to last state when the job is not running",
    ),
];

/// Keys under these prefixes are passed to a job's processes as `-D` properties (by the operator
/// to the TaskManager pods, by `floe run` to its processes): the processes read them from their own
/// properties, not from the job's configuration.
pub const PROCESS_PREFIXES: &[&str] = &[
    "security.ssl.internal.",
    "taskmanager.memory.managed.",
    "taskmanager.memory.process.size",
    "state.backend.rocksdb.memory.managed",
];

/// The keys of `configuration` a job's processes read from their `-D` properties.
pub fn process_properties(configuration: &BTreeMap<String, String>) -> Vec<(String, String)> {
    configuration
        .iter()
        .filter(|(k, _)| PROCESS_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The table's entry for `name`.
pub fn lookup(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// A key [`check`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A Flink key Floe does not implement.
    NotImplemented { key: String, note: &'static str },
    /// A key Floe does not know, with the known key nearest to it, if one is near.
    Unknown {
        key: String,
        nearest: Option<&'static str>,
    },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::NotImplemented { key, note } => {
                write!(
                    f,
                    "configuration key {key:?} has no effect: Floe does not implement it ({note})"
                )
            }
            Finding::Unknown {
                key,
                nearest: Some(nearest),
            } => write!(
                f,
                "configuration key {key:?} is not one Floe reads and is ignored; did you mean {nearest:?}?"
            ),
            Finding::Unknown { key, nearest: None } => {
                write!(
                    f,
                    "configuration key {key:?} is not one Floe reads and is ignored"
                )
            }
        }
    }
}

/// Every key of `keys` Floe does not read, in the order given.
pub fn check<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<Finding> {
    keys.into_iter()
        .filter(|key| lookup(key).is_none())
        .map(|key| match NOT_IMPLEMENTED.iter().find(|(k, _)| *k == key) {
            Some((_, note)) => Finding::NotImplemented {
                key: key.to_string(),
                note,
            },
            None => Finding::Unknown {
                key: key.to_string(),
                nearest: nearest(key),
            },
        })
        .collect()
}

/// The known key nearest to `key`: within a few edits (a typo), or one that ends with it (a
/// key written without its first segments, `checkpointing.interval`).
fn nearest(key: &str) -> Option<&'static str> {
    let (best, distance) = KEYS
        .iter()
        .map(|k| (k.name, edit_distance(key, k.name)))
        .min_by_key(|(_, d)| *d)?;
    if distance <= (key.len() / 6).max(2) {
        return Some(best);
    }
    KEYS.iter()
        .map(|k| k.name)
        .find(|name| key.contains('.') && name.ends_with(&format!(".{key}")))
}

/// Levenshtein distance (insertions, deletions, substitutions), over bytes: keys are ASCII.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// The table as Markdown: every key, then the Flink keys Floe does not implement.
pub fn markdown() -> String {
    let mut out = String::from("| Key | Value | Default | Read by | What it does |\n|---|---|---|---|---|\n");
    for k in KEYS {
        let readers: Vec<String> = k.read_by.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            k.name,
            k.value.replace('|', "\\|"),
            k.default,
            readers.join(", "),
            k.doc
        ));
    }
    out.push_str("\nFlink keys Floe does not implement (a job that sets one is warned):\n\n");
    out.push_str("| Key | Instead |\n|---|---|\n");
    for (key, note) in NOT_IMPLEMENTED {
        out.push_str(&format!("| `{key}` | {note} |\n"));
    }
    out
}

#[cfg(test)]
mod tests;
