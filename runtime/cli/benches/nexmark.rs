//! Nexmark, Floe against Apache Flink 2.3 on the same events in the same run: the events are
//! generated once by Floe (`nexmark --query export`, JSON lines of the suite's `datagen` schema,
//! one file per source subtask), then each query runs on both engines reading those files
//! (parse included), at the same parallelism, Flink through `../shared/bench/flink/flink-sql.sh`
//! with the suite's SQL text over the filesystem connector and JSON format. Each engine's rows
//! are checked against the query's definition evaluated in memory
//! (`floe_datastream::nexmark::reference`), and so against each other.
//!
//! Run: `cargo bench -p floe --bench nexmark --no-default-features` (options after `--`:
//! `--events N`, default 1,000,000; `--parallelism P`, default 2; `--queries q0,q5,...`;
//! `--runs R` Floe runs per query, default 3 (the median is shown); `--skip-flink`).
//! Throughput is events per second per core: events / job time / parallelism (the job time is
//! what each engine reports for the job itself: Floe's `FINISHED in`, Flink's `wall_s`; neither
//! includes starting the JVM or the processes). Peak memory is the whole process tree's.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{arg, job_seconds, manifest, measure};
use floe_datastream::nexmark::{Event, NexmarkConfig, output_table, parse_sql_timestamp, reference};

const FLOE: &str = env!("CARGO_BIN_EXE_floe");
const ALL: [&str; 10] = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11", "q12"];

/// The suite's `datagen` table over the exported files, and its `person`, `auction` and `bid`
/// views (`ddl_views.sql`).
const SOURCE: &str = r#"
CREATE TABLE nexmark (
    event_type int,
    person ROW<id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, city VARCHAR, state VARCHAR, `dateTime` TIMESTAMP(3), extra VARCHAR>,
    auction ROW<id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT, `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra VARCHAR>,
    bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, `dateTime` TIMESTAMP(3), extra VARCHAR>,
    `dateTime` AS
        CASE
            WHEN event_type = 0 THEN person.`dateTime`
            WHEN event_type = 1 THEN auction.`dateTime`
            ELSE bid.`dateTime`
        END,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${EVENTS}', 'format' = 'json');
CREATE VIEW person AS
SELECT person.id, person.name, person.emailAddress, person.creditCard, person.city, person.state, `dateTime`, person.extra
FROM nexmark WHERE event_type = 0;
CREATE VIEW auction AS
SELECT auction.id, auction.itemName, auction.description, auction.initialBid, auction.reserve, `dateTime`, auction.expires, auction.seller, auction.category, auction.extra
FROM nexmark WHERE event_type = 1;
CREATE VIEW bid AS
SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url, `dateTime`, bid.extra
FROM nexmark WHERE event_type = 2;
"#;

/// A query's sink columns (in order) and its SQL (`queries/qN.sql`, the sink a filesystem).
fn query_sql(query: &str) -> (&'static [&'static str], String) {
    let sink = |columns: &str| {
        format!(
            "CREATE TABLE nexmark_{query} ({columns}) WITH ('connector' = 'filesystem', 'path' = '${{OUT}}', 'format' = 'json');\n"
        )
    };
    match query {
        "q0" => (
            &["auction", "bidder", "price", "dateTime", "extra"],
            sink("auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra VARCHAR")
                + "INSERT INTO nexmark_q0 SELECT auction, bidder, price, `dateTime`, extra FROM bid;\n",
        ),
        "q1" => (
            &["auction", "bidder", "price", "dateTime", "extra"],
            sink(
                "auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), `dateTime` TIMESTAMP(3), extra VARCHAR",
            ) + "INSERT INTO nexmark_q1 SELECT auction, bidder, 0.908 * price as price, `dateTime`, extra FROM bid;\n",
        ),
        "q2" => (
            &["auction", "price"],
            sink("auction BIGINT, price BIGINT")
                + "INSERT INTO nexmark_q2 SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;\n",
        ),
        "q3" => (
            &["name", "city", "state", "id"],
            sink("name VARCHAR, city VARCHAR, state VARCHAR, id BIGINT")
                + "INSERT INTO nexmark_q3
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P on A.seller = P.id
WHERE A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');
",
        ),
        // An updating result: the filesystem sink takes appends only, so Flink prints its
        // changelog (`+I[..]`, `-U[..]`, `+U[..]`), read from its stdout.
        "q4" => (
            &[],
            "CREATE TABLE nexmark_q4 (id BIGINT, final BIGINT) WITH ('connector' = 'print');
INSERT INTO nexmark_q4
SELECT Q.category, AVG(Q.final)
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category;
"
            .to_string(),
        ),
        "q8" => (
            &["id", "name", "stime"],
            sink("id BIGINT, name VARCHAR, stime TIMESTAMP(3)")
                + "INSERT INTO nexmark_q8
SELECT P.id, P.name, P.starttime
FROM (
  SELECT P.id, P.name,
         TUMBLE_START(P.`dateTime`, INTERVAL '10' SECOND) AS starttime,
         TUMBLE_END(P.`dateTime`, INTERVAL '10' SECOND) AS endtime
  FROM person P
  GROUP BY P.id, P.name, TUMBLE(P.`dateTime`, INTERVAL '10' SECOND)
) P
JOIN (
  SELECT A.seller,
         TUMBLE_START(A.`dateTime`, INTERVAL '10' SECOND) AS starttime,
         TUMBLE_END(A.`dateTime`, INTERVAL '10' SECOND) AS endtime
  FROM auction A
  GROUP BY A.seller, TUMBLE(A.`dateTime`, INTERVAL '10' SECOND)
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
",
        ),
        "q5" => (
            &["auction", "num"],
            sink("auction BIGINT, num BIGINT")
                + "INSERT INTO nexmark_q5
SELECT AuctionBids.auction, AuctionBids.num
 FROM (
   SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
     FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
     GROUP BY auction, window_start, window_end
 ) AS AuctionBids
 JOIN (
   SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
   FROM (
     SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
     FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
     GROUP BY auction, window_start, window_end
     ) AS CountBids
   GROUP BY CountBids.starttime, CountBids.endtime
 ) AS MaxBids
 ON AuctionBids.starttime = MaxBids.starttime AND
    AuctionBids.endtime = MaxBids.endtime AND
    AuctionBids.num >= MaxBids.maxn;
",
        ),
        // The suite's INSERT fills its sink by position: `bidder` gets the price, `price` the bidder.
        "q7" => (
            &["auction", "bidder", "price", "dateTime", "extra"],
            sink("auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra VARCHAR")
                + "INSERT INTO nexmark_q7
SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
from bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end as `dateTime`
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime`  - INTERVAL '10' SECOND AND B1.`dateTime`;
",
        ),
        "q11" => (
            &["bidder", "bid_count", "starttime", "endtime"],
            sink("bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)")
                + "INSERT INTO nexmark_q11
SELECT B.bidder, count(*) as bid_count,
    SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) as starttime,
    SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) as endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND);
",
        ),
        "q12" => (
            &["bidder", "bid_count", "starttime", "endtime"],
            sink("bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)")
                + "CREATE VIEW B AS SELECT *, PROCTIME() as p_time FROM bid;
INSERT INTO nexmark_q12
SELECT bidder, count(*) as bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end;
",
        ),
        other => panic!("no SQL for {other}"),
    }
}

/// Every line of every visible file under `dir`.
fn lines(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = e.path();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                out.extend(
                    std::fs::read_to_string(&path)
                        .unwrap_or_default()
                        .lines()
                        .map(String::from),
                );
            }
        }
    }
    out
}

/// Flink's JSON rows as Floe writes them: TAB-separated columns, times in ms, decimals with 3
/// places.
fn flink_rows(dir: &Path, query: &str, columns: &[&str]) -> Vec<String> {
    let mut rows: Vec<String> = lines(dir)
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("Flink wrote JSON");
            columns
                .iter()
                .map(|c| match &v[*c] {
                    serde_json::Value::String(s) => {
                        parse_sql_timestamp(s).map_or_else(|| s.clone(), |ms| ms.to_string())
                    }
                    // DECIMAL(23, 3) (q1's price): Flink's JSON drops trailing zeros, and a whole
                    // number prints as an integer.
                    serde_json::Value::Number(n) if n.is_f64() || (query == "q1" && *c == "price") => {
                        format!("{:.3}", n.as_f64().unwrap_or(0.0))
                    }
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect();
    rows.sort();
    rows
}

/// Flink's printed changelog (`2> +U[10, 123]`) as Floe writes one (`+U\t10\t123`), folded into
/// the table it ends as.
fn flink_printed_table(stdout: &str, query: &str) -> Vec<String> {
    let rows = stdout
        .lines()
        .filter_map(|line| {
            let line = line.split_once("> ").map_or(line, |(_, rest)| rest).trim();
            let (op, rest) = line.split_once('[')?;
            matches!(op, "+I" | "-U" | "+U" | "-D")
                .then(|| format!("{op}\t{}", rest.trim_end_matches(']').replace(", ", "\t")))
        })
        .collect();
    output_table(query, rows).unwrap_or_else(|e| vec![format!("BAD CHANGELOG: {e}")])
}

/// Floe's rows in the order each subtask wrote them, as the table they stand for (q4's changelog
/// folded), sorted.
fn floe_rows(dir: &Path, query: &str) -> Vec<String> {
    output_table(query, lines(dir)).unwrap_or_else(|e| vec![format!("BAD CHANGELOG: {e}")])
}

struct Row {
    query: String,
    rows: usize,
    floe_s: f64,
    floe_rss_mib: f64,
    floe_ok: String,
    flink_s: Option<f64>,
    flink_rss_mib: Option<f64>,
    flink_ok: String,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: u64 = arg(&args, "--events")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let parallelism: u32 = arg(&args, "--parallelism")
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let runs: usize = arg(&args, "--runs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let queries: Vec<String> = arg(&args, "--queries")
        .map(|q| q.split(',').map(String::from).collect())
        .unwrap_or_else(|| ALL.map(String::from).to_vec());
    let skip_flink = args.iter().any(|a| a == "--skip-flink");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join(format!("bench-data/nexmark-{events}"));
    let data = dir.join("events");
    std::fs::create_dir_all(&dir).expect("bench dir");
    if !data.exists() {
        eprintln!("exporting {events} events to {} ...", data.display());
        let args: Vec<String> = ["--query", "export", "--events", &events.to_string(), "--output"]
            .map(String::from)
            .into_iter()
            .chain([data.display().to_string()])
            .collect();
        let m = manifest(&dir, "export", "nexmark", &args, parallelism, &[]);
        let (_, _, out) = measure(
            Command::new(FLOE)
                .args(["run", "-f"])
                .arg(&m)
                .arg("--work-dir")
                .arg(dir.join("work")),
        );
        eprintln!("{}", out.trim());
    }
    let all_events: Vec<Event> = floe_datastream::nexmark::events(&NexmarkConfig::default(), events);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/flink/flink-sql.sh");
    // Flink's fixed cost in its `wall_s` (starting the MiniCluster, planning, deploying): a
    // ten-row query in the same run, shown so the ratio can be read without it.
    let flink_fixed = (!skip_flink).then(|| {
        let sql = dir.join("flink-fixed.sql");
        std::fs::write(
            &sql,
            "CREATE TABLE src (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n\
             CREATE TABLE snk (a BIGINT) WITH ('connector' = 'blackhole');\n\
             INSERT INTO snk SELECT a FROM src;\n",
        )
        .expect("sql");
        let (wall, _, stdout) = measure(
            Command::new("bash")
                .arg(&script)
                .arg(&sql)
                .arg("streaming")
                .arg(parallelism.to_string()),
        );
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("wall_s=").and_then(|v| v.parse::<f64>().ok()))
            .unwrap_or(wall)
    });
    let mut table = Vec::new();
    for query in &queries {
        let want: Option<Vec<String>> = reference(query, &all_events);
        let check = |got: &[String]| match &want {
            Some(w) if w.as_slice() == got => "= definition".to_string(),
            Some(w) => format!("DIFFERS ({} rows, {} expected)", got.len(), w.len()),
            // q12 is on processing time: only the total can be checked.
            None => format!(
                "{} counted",
                got.iter()
                    .filter_map(|r| r.split('\t').nth(1)?.parse::<u64>().ok())
                    .sum::<u64>()
            ),
        };
        let mut floe_runs = Vec::new();
        let mut floe_got = Vec::new();
        for run in 0..runs {
            let out = dir.join(format!("floe-{query}"));
            let _ = std::fs::remove_dir_all(&out);
            let job_args: Vec<String> = [
                "--query",
                query,
                "--input",
                &data.display().to_string(),
                "--output",
                &out.display().to_string(),
            ]
            .map(String::from)
            .to_vec();
            let m = manifest(
                &dir,
                &format!("floe-{query}"),
                "nexmark",
                &job_args,
                parallelism,
                &[],
            );
            let (wall, peak, stdout) = measure(
                Command::new(FLOE)
                    .args(["run", "-f"])
                    .arg(&m)
                    .arg("--work-dir")
                    .arg(dir.join("work")),
            );
            let secs = job_seconds(&stdout, wall);
            eprintln!("floe {query} run {run}: {secs:.2} s, peak {} MiB", peak / 1024);
            floe_runs.push((secs, peak));
            floe_got = floe_rows(&out, query);
        }
        floe_runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (floe_s, floe_peak) = floe_runs[floe_runs.len() / 2];
        let mut row = Row {
            query: query.clone(),
            rows: floe_got.len(),
            floe_s,
            floe_rss_mib: floe_peak as f64 / 1024.0,
            floe_ok: check(&floe_got),
            flink_s: None,
            flink_rss_mib: None,
            flink_ok: "-".into(),
        };
        if !skip_flink {
            let (columns, sql) = query_sql(query);
            let sql_path = dir.join(format!("flink-{query}.sql"));
            std::fs::write(&sql_path, format!("{SOURCE}\n{sql}")).expect("sql");
            let out = dir.join(format!("flink-{query}"));
            let _ = std::fs::remove_dir_all(&out);
            let mut command = Command::new("bash");
            command
                .arg(&script)
                .arg(&sql_path)
                .arg("streaming")
                .arg(parallelism.to_string())
                .env("EVENTS", &data);
            // A printing sink (q4) names no directory; the script's own `OUT` then holds only
            // what Flink printed.
            if !columns.is_empty() {
                command.env("OUT", &out);
            }
            let (wall, peak, stdout) = measure(&mut command);
            let secs = stdout
                .split_whitespace()
                .find_map(|w| w.strip_prefix("wall_s=").and_then(|v| v.parse().ok()))
                .unwrap_or(wall);
            eprintln!("flink {query}: {secs:.2} s, peak {} MiB", peak / 1024);
            let got = if columns.is_empty() {
                flink_printed_table(&stdout, query)
            } else {
                flink_rows(&out, query, columns)
            };
            row.flink_s = Some(secs);
            row.flink_rss_mib = Some(peak as f64 / 1024.0);
            row.flink_ok = check(&got);
            if want.is_some() && got != floe_got {
                eprintln!("{query}: Floe and Flink differ");
            }
        }
        table.push(row);
    }
    let per_core = |s: f64| events as f64 / s / f64::from(parallelism);
    println!(
        "\nNexmark on {events} events (the same JSON lines for both), parallelism {parallelism}, STREAMING; events/s per core = events / job s / {parallelism}"
    );
    if let Some(fixed) = flink_fixed {
        println!(
            "Flink's fixed cost (a 10-row query's wall_s in this run): {fixed:.2} s; ratio = flink s / floe s; ratio-fixed = (flink s - {fixed:.2}) / floe s"
        );
    }
    println!(
        "{:<5} {:>8} {:>8} {:>12} {:>9} {:>8} {:>12} {:>9} {:>7} {:>11}  {:<16} {:<16}",
        "query",
        "rows",
        "floe s",
        "floe ev/s/c",
        "floe MiB",
        "flink s",
        "flink ev/s/c",
        "flink MiB",
        "ratio",
        "ratio-fixed",
        "floe rows",
        "flink rows"
    );
    for r in &table {
        let (fs, fr, ratio, adjusted) = match (r.flink_s, flink_fixed) {
            (Some(s), Some(fixed)) => (
                format!("{s:.2}"),
                format!("{:.0}", per_core(s)),
                format!("{:.1}x", s / r.floe_s),
                format!("{:.1}x", (s - fixed) / r.floe_s),
            ),
            _ => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        println!(
            "{:<5} {:>8} {:>8.2} {:>12.0} {:>9.0} {:>8} {:>12} {:>9} {:>7} {:>11}  {:<16} {:<16}",
            r.query,
            r.rows,
            r.floe_s,
            per_core(r.floe_s),
            r.floe_rss_mib,
            fs,
            fr,
            r.flink_rss_mib.map_or("-".into(), |m| format!("{m:.0}")),
            ratio,
            adjusted,
            r.floe_ok,
            r.flink_ok
        );
    }
}
