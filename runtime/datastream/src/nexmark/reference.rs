//! The queries' SQL definitions evaluated in memory over the generated bids, independently of
//! the operators that run them: what the tests and the benchmark hold Floe's (and Flink's)
//! output to. Rows are formatted as the job writes them (TAB-separated, times in ms).

use std::collections::{BTreeMap, HashMap};

use super::{Auction, Bid, Event, Person};

fn row(fields: &[String]) -> String {
    fields.join("\t")
}

fn bid_row(b: &Bid) -> String {
    row(&[
        b.auction.to_string(),
        b.bidder.to_string(),
        b.price.to_string(),
        b.date_time.to_string(),
        b.extra.clone(),
    ])
}

/// Windows `[start, start + size)` every `slide` that hold `ts` (Flink's HOP).
fn hops(ts: i64, size: i64, slide: i64) -> Vec<i64> {
    let mut starts = Vec::new();
    let mut start = ts - ts.rem_euclid(slide);
    while start > ts - size {
        starts.push(start);
        start -= slide;
    }
    starts
}

/// Sessions of one key's sorted times: `(start, end, count)`, a gap of more than `gap` cuts.
fn sessions(times: &mut [i64], gap: i64) -> Vec<(i64, i64, u64)> {
    times.sort_unstable();
    let mut out = Vec::new();
    let (mut start, mut last, mut n) = (times[0], times[0], 0u64);
    for &t in times.iter() {
        if t > last + gap {
            out.push((start, last + gap, n));
            start = t;
            n = 0;
        }
        last = t;
        n += 1;
    }
    out.push((start, last + gap, n));
    out
}

/// q3: `SELECT P.name, P.city, P.state, A.id FROM auction A INNER JOIN person P ON A.seller =
/// P.id WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')`.
fn q3(persons: &[&Person], auctions: &[&Auction]) -> Vec<String> {
    let by_id: HashMap<u64, Vec<&Person>> = persons
        .iter()
        .filter(|p| matches!(p.state.as_str(), "OR" | "ID" | "CA"))
        .fold(HashMap::new(), |mut m, p| {
            m.entry(p.id).or_default().push(*p);
            m
        });
    let mut out = Vec::new();
    for a in auctions.iter().filter(|a| a.category == 10) {
        for p in by_id.get(&a.seller).into_iter().flatten() {
            out.push(row(&[
                p.name.clone(),
                p.city.clone(),
                p.state.clone(),
                a.id.to_string(),
            ]));
        }
    }
    out
}

/// q4: `SELECT Q.category, AVG(Q.final) FROM (SELECT MAX(B.price) AS final, A.category FROM
/// auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires GROUP
/// BY A.id, A.category) Q GROUP BY Q.category` (AVG of a BIGINT is a truncated BIGINT).
fn q4(auctions: &[&Auction], bids: &[Bid]) -> Vec<String> {
    let by_id: HashMap<u64, &Auction> = auctions.iter().map(|a| (a.id, *a)).collect();
    let mut finals: HashMap<u64, u64> = HashMap::new();
    for b in bids {
        if let Some(a) = by_id.get(&b.auction)
            && (a.date_time..=a.expires).contains(&b.date_time)
        {
            let best = finals.entry(a.id).or_insert(b.price);
            *best = (*best).max(b.price);
        }
    }
    let mut per_category: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (id, best) in finals {
        let c = per_category.entry(by_id[&id].category).or_default();
        c.0 += best;
        c.1 += 1;
    }
    per_category
        .iter()
        .map(|(category, (sum, n))| row(&[category.to_string(), (sum / n).to_string()]))
        .collect()
}

/// q8: persons who opened an auction in the 10 s tumbling window they registered in: `SELECT
/// P.id, P.name, P.starttime` of the join of `person` and `auction`, each grouped by key and
/// `TUMBLE(dateTime, INTERVAL '10' SECOND)`, on id = seller and equal windows.
fn q8(persons: &[&Person], auctions: &[&Auction]) -> Vec<String> {
    let window = |t: i64| t.div_euclid(10_000) * 10_000;
    let sellers: std::collections::HashSet<(u64, i64)> =
        auctions.iter().map(|a| (a.seller, window(a.date_time))).collect();
    let groups: std::collections::BTreeSet<(u64, String, i64)> = persons
        .iter()
        .map(|p| (p.id, p.name.clone(), window(p.date_time)))
        .collect();
    groups
        .into_iter()
        .filter(|(id, _, start)| sellers.contains(&(*id, *start)))
        .map(|(id, name, start)| row(&[id.to_string(), name, start.to_string()]))
        .collect()
}

/// Query `query`'s rows over `events`, sorted; `None` for a query without a reference (q12, on
/// processing time). q4's rows are its final table (the job writes a changelog of it).
pub fn reference(query: &str, events: &[Event]) -> Option<Vec<String>> {
    let (mut persons, mut auctions, mut bid_list) = (Vec::new(), Vec::new(), Vec::new());
    for e in events {
        match e {
            Event::Person(p) => persons.push(p),
            Event::Auction(a) => auctions.push(a),
            Event::Bid(b) => bid_list.push(b.clone()),
        }
    }
    let bids = &bid_list[..];
    let mut rows: Vec<String> = match query {
        "q3" => q3(&persons, &auctions),
        "q4" => q4(&auctions, bids),
        "q8" => q8(&persons, &auctions),
        "q0" => bids.iter().map(bid_row).collect(),
        "q1" => bids
            .iter()
            .map(|b| {
                let euros = format!("{:.3}", b.price as f64 * 0.908);
                row(&[
                    b.auction.to_string(),
                    b.bidder.to_string(),
                    euros,
                    b.date_time.to_string(),
                    b.extra.clone(),
                ])
            })
            .collect(),
        "q2" => bids
            .iter()
            .filter(|b| b.auction % 123 == 0)
            .map(|b| row(&[b.auction.to_string(), b.price.to_string()]))
            .collect(),
        "q5" => {
            // count(*) per auction and hop window, then the auctions at the window's maximum.
            let mut counts: BTreeMap<i64, HashMap<u64, u64>> = BTreeMap::new();
            for b in bids {
                for start in hops(b.date_time, 10_000, 2_000) {
                    *counts.entry(start).or_default().entry(b.auction).or_default() += 1;
                }
            }
            let mut out = Vec::new();
            for per_auction in counts.values() {
                let max = per_auction.values().copied().max().unwrap_or(0);
                for (auction, n) in per_auction {
                    if *n >= max {
                        out.push(row(&[auction.to_string(), n.to_string()]));
                    }
                }
            }
            out
        }
        "q7" => {
            // The highest price per 10 s tumbling window; the bids at that price whose time is
            // within [window end - 10 s, window end] (SQL's BETWEEN: both ends).
            let mut max: BTreeMap<i64, u64> = BTreeMap::new();
            for b in bids {
                let start = b.date_time - b.date_time.rem_euclid(10_000);
                let m = max.entry(start + 10_000).or_default();
                *m = (*m).max(b.price);
            }
            let mut out = Vec::new();
            for b in bids {
                for (end, m) in &max {
                    if b.price == *m && b.date_time >= end - 10_000 && b.date_time <= *end {
                        out.push(row(&[
                            b.auction.to_string(),
                            b.price.to_string(),
                            b.bidder.to_string(),
                            b.date_time.to_string(),
                            b.extra.clone(),
                        ]));
                    }
                }
            }
            out
        }
        "q11" => {
            let mut by_bidder: HashMap<u64, Vec<i64>> = HashMap::new();
            for b in bids {
                by_bidder.entry(b.bidder).or_default().push(b.date_time);
            }
            let mut out = Vec::new();
            for (bidder, mut times) in by_bidder {
                for (start, end, n) in sessions(&mut times, 10_000) {
                    out.push(row(&[
                        bidder.to_string(),
                        n.to_string(),
                        start.to_string(),
                        end.to_string(),
                    ]));
                }
            }
            out
        }
        _ => return None,
    };
    rows.sort();
    Some(rows)
}

/// A query's output rows as the table they stand for, sorted: q4 writes a changelog (`+I`, `-U`,
/// `+U` and `-D` rows, the change first), folded here into the table it ends as; other queries
/// append, and their rows are the table. An error names a row that retracts what is not there.
pub fn output_table(query: &str, rows: Vec<String>) -> Result<Vec<String>, String> {
    if query != "q4" {
        let mut rows = rows;
        rows.sort();
        return Ok(rows);
    }
    let mut table: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows {
        let (op, rest) = r
            .split_once('\t')
            .ok_or_else(|| format!("{query}: {r:?} is not a changelog row"))?;
        match op {
            "+I" | "+U" => *table.entry(rest.to_string()).or_default() += 1,
            "-U" | "-D" => match table.get_mut(rest) {
                Some(n) if *n > 0 => *n -= 1,
                _ => return Err(format!("{query}: {r:?} retracts a row the table does not hold")),
            },
            other => return Err(format!("{query}: unknown change {other:?} in {r:?}")),
        }
    }
    Ok(table
        .into_iter()
        .flat_map(|(r, n)| std::iter::repeat_n(r, n as usize))
        .collect())
}
