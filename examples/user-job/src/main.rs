//! A user's own Floe job: page visits per user, from CSV lines `user,page,millis`.
//!
//! The crate registers its job with the arguments it takes, and its `main` is one call that gives
//! it the whole `floe` command (`run`, `jobmanager`, `taskmanager`, `plan`, `jobs`) with that job:
//! `floe-user-job run -f visits.yaml` runs it on a local cluster of this binary's processes, and
//! the image built by the Dockerfile runs it in Kubernetes.

use std::process::ExitCode;

use floe::datastream::metrics::{Counter, Histogram};
use floe::datastream::{
    ArgKind, ArgSpec, Collector, FunctionResult, JobSpec, KeyedContext, KeyedProcessFunction, MAX_WATERMARK,
    Result, RuntimeContext, StreamExecutionEnvironment,
};

/// One line of the input: a user looked at a page for some milliseconds.
#[derive(Clone, Debug, Default, PartialEq, floe::datastream::Data)]
pub struct Visit {
    pub user: String,
    pub page: String,
    pub millis: u64,
}

/// What the job keeps per user (keyed state, checkpointed with the job) and writes at the end: how
/// many visits, their total time, and the page looked at longest.
#[derive(Clone, Debug, Default, PartialEq, floe::datastream::Data)]
pub struct UserStats {
    pub user: String,
    pub visits: u64,
    pub total_millis: u64,
    pub longest_page: String,
    pub longest_millis: u64,
}

impl Visit {
    /// Parses `user,page,millis`; the error names the line's problem.
    pub fn parse(line: &str) -> std::result::Result<Visit, String> {
        let mut parts = line.split(',');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(user), Some(page), Some(millis), None) if !user.is_empty() => Ok(Visit {
                user: user.to_string(),
                page: page.to_string(),
                millis: millis
                    .trim()
                    .parse()
                    .map_err(|_| format!("millis: expected an integer, got {millis:?} in {line:?}"))?,
            }),
            _ => Err(format!("expected user,page,millis, got {line:?}")),
        }
    }
}

/// Per user: adds each visit to the user's stats; writes them once the input has ended (the
/// end-of-input watermark fires the timer), so the output has one line per user in either mode.
/// Each subtask runs its own copy (`Clone`); its `open` registers the metrics the TaskManager's
/// `/metrics` serves (`flink_taskmanager_job_task_operator_visits_seen`, `..._visits_millis`).
#[derive(Clone, Default)]
struct Totals {
    seen: Option<Counter>,
    millis: Option<Histogram>,
}

impl KeyedProcessFunction<String, Visit, UserStats> for Totals {
    type State = UserStats;

    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let visits = ctx.metric_group().add_group("visits");
        self.seen = Some(visits.counter("seen"));
        self.millis = Some(visits.histogram("millis", 1000));
        Ok(())
    }

    fn process_element(
        &self,
        visit: Visit,
        ctx: &mut KeyedContext<'_, String, UserStats>,
        _out: &mut dyn Collector<UserStats>,
    ) {
        if let (Some(seen), Some(millis)) = (&self.seen, &self.millis) {
            seen.inc();
            millis.update(visit.millis as i64);
        }
        let stats = ctx.state();
        if stats.visits == 0 {
            stats.user = visit.user.clone();
        }
        stats.visits += 1;
        stats.total_millis += visit.millis;
        // The longest visit; on a tie the page that sorts first, so the result is deterministic.
        if visit.millis > stats.longest_millis
            || (visit.millis == stats.longest_millis && visit.page < stats.longest_page)
            || stats.visits == 1
        {
            stats.longest_millis = visit.millis;
            stats.longest_page = visit.page;
        }
        ctx.register_event_time_timer(MAX_WATERMARK);
    }

    fn on_timer(
        &self,
        _timestamp: i64,
        ctx: &mut KeyedContext<'_, String, UserStats>,
        out: &mut dyn Collector<UserStats>,
    ) {
        let stats = std::mem::take(ctx.state());
        if stats.visits >= 1 {
            out.collect(stats);
        }
        ctx.clear_state();
    }
}

/// The job's declared arguments: `floe-user-job jobs` lists them, and a wrong one is refused when
/// the job is submitted, naming it.
const USER_VISITS: JobSpec = JobSpec {
    description: "page visits per user from CSV lines user,page,millis: visits, total millis, longest page",
    args: &[
        ArgSpec::required("input", ArgKind::Location, "CSV files of visits"),
        ArgSpec::required("output", ArgKind::Location, "where the per-user lines go"),
        ArgSpec::optional(
            "min-visits",
            ArgKind::Positive,
            Some("1"),
            "leave out users with fewer visits",
        ),
    ],
};

fn user_visits(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let args = USER_VISITS.parse("user-visits", args)?;
    let min_visits = args.u64("min-visits")?;
    // A line that does not parse fails the job at once (no restart could read it differently),
    // naming the file, the line's number and why: nothing is dropped unseen.
    env.read_text_records(args.text("input")?, false, Visit::parse)
        .key_by(|v: &Visit| v.user.clone())
        .process_function(Totals::default())
        .filter(move |s: &UserStats| s.visits >= min_visits)
        .sink_to_file(args.text("output")?);
    Ok(())
}

fn main() -> ExitCode {
    // Floe's own jobs stay available next to the user's (`JobRegistry::new()` for only these).
    let mut jobs = floe::jobs();
    jobs.register_declared("user-visits", USER_VISITS, user_visits);
    floe::main(jobs)
}
