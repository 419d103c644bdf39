//! The Nexmark event generator, after the rules and defaults of the reference generator the
//! Nexmark suites use (Beam's `Generator`, `nexmark/nexmark`'s `NexmarkGenerator`): event `n` is
//! a person, an auction or a bid by `n mod 50` (proportions 1/3/46), its time is
//! `base + n * 1e6 / rate` µs, ids follow the number of persons and auctions made so far with hot
//! sellers, auctions and bidders, and every random field comes from a generator seeded by
//! `(seed, n)` (as Beam seeds one per event), so event `n` is the same whichever subtask makes it
//! and at any parallelism.
//!
//! Differences from the Flink suite's connector (whose random source is unseeded): event ids
//! start at 0 (Beam's), so person 1000 and auction 1000 exist; a bid's bidder is a person id (the
//! suite adds 1000 twice); the base time is Beam's fixed 2015-07-15, not the wall clock.

use std::sync::OnceLock;

use super::model::{Auction, Bid, Event, Person};
use crate::rng::SplitMix;

pub const FIRST_PERSON_ID: u64 = 1000;
pub const FIRST_AUCTION_ID: u64 = 1000;
pub const FIRST_CATEGORY_ID: u64 = 10;
const NUM_CATEGORIES: u32 = 5;
const PERSON_ID_LEAD: u64 = 10;
const AUCTION_ID_LEAD: u64 = 10;
const HOT_SELLER_RATIO: u64 = 100;
const HOT_AUCTION_RATIO: u64 = 100;
const HOT_BIDDER_RATIO: u64 = 100;
const CHANNELS: usize = 10_000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// 2015-07-15T00:00:00Z, Beam's base time.
pub const BASE_TIME: i64 = 1_436_918_400_000;

const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];

/// The generator's settings: the reference defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct NexmarkConfig {
    pub seed: u64,
    /// Events per second of event time (`first-event.rate`): event `n` is `n / rate` s after
    /// the base time.
    pub event_rate: u64,
    pub person_proportion: u64,
    pub auction_proportion: u64,
    pub bid_proportion: u64,
    pub num_in_flight_auctions: u64,
    pub num_active_people: u64,
    pub hot_auction_ratio: u32,
    pub hot_sellers_ratio: u32,
    pub hot_bidders_ratio: u32,
    pub avg_person_bytes: usize,
    pub avg_auction_bytes: usize,
    pub avg_bid_bytes: usize,
    pub base_time: i64,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        NexmarkConfig {
            seed: 0,
            event_rate: 10_000,
            person_proportion: 1,
            auction_proportion: 3,
            bid_proportion: 46,
            num_in_flight_auctions: 100,
            num_active_people: 1000,
            hot_auction_ratio: 2,
            hot_sellers_ratio: 4,
            hot_bidders_ratio: 4,
            avg_person_bytes: 200,
            avg_auction_bytes: 500,
            avg_bid_bytes: 100,
            base_time: BASE_TIME,
        }
    }
}

/// The events' generator: [`SplitMix`], seeded per event.
struct Rng(SplitMix);

impl Rng {
    fn for_event(seed: u64, n: u64) -> Self {
        Rng(SplitMix::new(
            seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5851_F42D_4C95_7F2D,
        ))
    }

    /// Uniform in `0..bound` (`bound` >= 1).
    fn below(&mut self, bound: u64) -> u64 {
        self.0.below(bound)
    }

    fn int(&mut self, bound: u32) -> usize {
        self.below(u64::from(bound)) as usize
    }

    fn unit(&mut self) -> f64 {
        self.0.unit()
    }

    /// The reference `nextPrice`: `round(10^(u * 6) * 100)`, 100 to 100,000,000 (cents).
    fn price(&mut self) -> u64 {
        (10f64.powf(self.unit() * 6.0) * 100.0).round() as u64
    }

    /// The reference `nextString`: 3 to `max - 1` characters, a..z with `special` one time in 13,
    /// trimmed.
    fn string(&mut self, max: u32, special: char) -> String {
        let len = 3 + self.int(max - 3);
        let mut s = String::with_capacity(len);
        for _ in 0..len {
            if self.int(13) == 0 {
                s.push(special);
            } else {
                s.push((b'a' + self.int(26) as u8) as char);
            }
        }
        s.trim_matches(' ').to_string()
    }

    /// The reference `nextExtra`: padding that brings a record to about `average` bytes.
    fn extra(&mut self, current: usize, average: usize) -> String {
        if current > average {
            return String::new();
        }
        let d = (average - current) as f64;
        let delta = (d * 0.2).round() as u64;
        let size = d as u64 - delta + if delta == 0 { 0 } else { self.below(2 * delta) };
        let filler = filler();
        let start = self.below((filler.len() as u64).saturating_sub(size).max(1)) as usize;
        filler[start..start + size as usize].to_string()
    }
}

/// 1 MiB of letters the `extra` fields are cut from (the reference's `REUSABLE_EXTRA_STRING`),
/// the same in every process.
fn filler() -> &'static str {
    static FILLER: OnceLock<String> = OnceLock::new();
    FILLER.get_or_init(|| {
        let mut rng = Rng(SplitMix::new(0x4E45_584D_4152_4B21));
        (0..1 << 20).map(|_| (b'a' + rng.int(26) as u8) as char).collect()
    })
}

/// The channels' URLs: four hot ones and one per channel number (the reference's tables).
fn urls() -> &'static (Vec<String>, Vec<String>) {
    static URLS: OnceLock<(Vec<String>, Vec<String>)> = OnceLock::new();
    URLS.get_or_init(|| {
        let mut rng = Rng(SplitMix::new(0x5552_4C53));
        let base = |rng: &mut Rng| {
            format!(
                "https://www.nexmark.com/{}/{}/{}/item.htm?query=1",
                rng.string(5, '_'),
                rng.string(5, '_'),
                rng.string(5, '_')
            )
        };
        let hot = (0..4).map(|_| base(&mut rng)).collect();
        let channels = (0..CHANNELS)
            .map(|i| {
                let url = base(&mut rng);
                if rng.int(10) > 0 {
                    let id = (i as u32).reverse_bits() as i32;
                    format!("{url}&channel_id={}", i64::from(id).abs())
                } else {
                    url
                }
            })
            .collect();
        (hot, channels)
    })
}

impl NexmarkConfig {
    fn total(&self) -> u64 {
        self.person_proportion + self.auction_proportion + self.bid_proportion
    }

    /// When event `n` happens (ms since the epoch).
    pub fn timestamp(&self, n: u64) -> i64 {
        let delay_us = 1_000_000.0 / self.event_rate.max(1) as f64;
        self.base_time + ((n as f64 * delay_us) as i64) / 1000
    }

    fn last_base0_person_id(&self, id: u64) -> u64 {
        let (epoch, offset) = (id / self.total(), id % self.total());
        epoch * self.person_proportion + offset.min(self.person_proportion - 1)
    }

    fn last_base0_auction_id(&self, id: u64) -> u64 {
        let (mut epoch, mut offset) = (id / self.total(), id % self.total());
        if offset < self.person_proportion {
            // A person: the last auction of the previous epoch (none before the first).
            if epoch == 0 {
                return 0;
            }
            epoch -= 1;
            offset = self.auction_proportion - 1;
        } else if offset >= self.person_proportion + self.auction_proportion {
            offset = self.auction_proportion - 1;
        } else {
            offset -= self.person_proportion;
        }
        epoch * self.auction_proportion + offset
    }

    fn next_base0_person_id(&self, id: u64, rng: &mut Rng) -> u64 {
        let people = self.last_base0_person_id(id) + 1;
        let active = people.min(self.num_active_people);
        people - active + rng.below(active + PERSON_ID_LEAD)
    }

    fn next_base0_auction_id(&self, id: u64, rng: &mut Rng) -> u64 {
        let max = self.last_base0_auction_id(id);
        let min = max.saturating_sub(self.num_in_flight_auctions);
        min + rng.below(max - min + 1 + AUCTION_ID_LEAD)
    }

    /// Event number `n`.
    pub fn event(&self, n: u64) -> Event {
        let mut rng = Rng::for_event(self.seed, n);
        let ts = self.timestamp(n);
        let rem = n % self.total();
        if rem < self.person_proportion {
            Event::Person(self.person(n, ts, &mut rng))
        } else if rem < self.person_proportion + self.auction_proportion {
            Event::Auction(self.auction(n, ts, &mut rng))
        } else {
            Event::Bid(self.bid(n, ts, &mut rng))
        }
    }

    fn person(&self, n: u64, ts: i64, rng: &mut Rng) -> Person {
        let name = format!(
            "{} {}",
            FIRST_NAMES[rng.int(FIRST_NAMES.len() as u32)],
            LAST_NAMES[rng.int(LAST_NAMES.len() as u32)]
        );
        let email_address = format!("{}@{}.com", rng.string(7, ' '), rng.string(5, ' '));
        let credit_card = (0..4)
            .map(|_| format!("{:04}", rng.int(10_000)))
            .collect::<Vec<_>>()
            .join(" ");
        let city = US_CITIES[rng.int(US_CITIES.len() as u32)].to_string();
        let state = US_STATES[rng.int(US_STATES.len() as u32)].to_string();
        let size = 8 + name.len() + email_address.len() + credit_card.len() + city.len() + state.len();
        let extra = rng.extra(size, self.avg_person_bytes);
        Person {
            id: self.last_base0_person_id(n) + FIRST_PERSON_ID,
            name,
            email_address,
            credit_card,
            city,
            state,
            date_time: ts,
            extra,
        }
    }

    fn auction(&self, n: u64, ts: i64, rng: &mut Rng) -> Auction {
        let seller = if rng.int(self.hot_sellers_ratio) > 0 {
            (self.last_base0_person_id(n) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        } else {
            self.next_base0_person_id(n, rng)
        } + FIRST_PERSON_ID;
        let category = FIRST_CATEGORY_ID + rng.int(NUM_CATEGORIES) as u64;
        let initial_bid = rng.price();
        // An auction lasts up to twice the time until the in-flight auctions were all replaced.
        let later = n + self.num_in_flight_auctions * self.total() / self.auction_proportion;
        let horizon = (self.timestamp(later) - ts).max(0) as u64;
        let expires = ts + 1 + rng.below((horizon * 2).max(1)) as i64;
        let item_name = rng.string(20, ' ');
        let description = rng.string(100, ' ');
        let reserve = initial_bid + rng.price();
        let extra = rng.extra(
            8 + item_name.len() + description.len() + 40,
            self.avg_auction_bytes,
        );
        Auction {
            id: self.last_base0_auction_id(n) + FIRST_AUCTION_ID,
            item_name,
            description,
            initial_bid,
            reserve,
            date_time: ts,
            expires,
            seller,
            category,
            extra,
        }
    }

    fn bid(&self, n: u64, ts: i64, rng: &mut Rng) -> Bid {
        let auction = if rng.int(self.hot_auction_ratio) > 0 {
            (self.last_base0_auction_id(n) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        } else {
            self.next_base0_auction_id(n, rng)
        } + FIRST_AUCTION_ID;
        let bidder = if rng.int(self.hot_bidders_ratio) > 0 {
            // `+ 1`: hot bidders are not hot sellers.
            (self.last_base0_person_id(n) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
        } else {
            self.next_base0_person_id(n, rng)
        } + FIRST_PERSON_ID;
        let price = rng.price();
        let (hot, channels) = urls();
        let (channel, url) = if rng.int(2) > 0 {
            let i = rng.int(HOT_CHANNELS.len() as u32);
            (HOT_CHANNELS[i].to_string(), hot[i].clone())
        } else {
            let k = rng.int(CHANNELS as u32);
            (format!("channel-{k}"), channels[k].clone())
        };
        let extra = rng.extra(32, self.avg_bid_bytes);
        Bid {
            auction,
            bidder,
            price,
            channel,
            url,
            date_time: ts,
            extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_mix_ids_and_times_follow_the_reference_rules() {
        let c = NexmarkConfig::default();
        let events: Vec<Event> = (0..100_000).map(|n| c.event(n)).collect();
        let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
        assert_eq!(count(|e| matches!(e, Event::Person(_))), 2_000);
        assert_eq!(count(|e| matches!(e, Event::Auction(_))), 6_000);
        assert_eq!(count(|e| matches!(e, Event::Bid(_))), 92_000);
        // Event 0 is person 1000; events 1..=3 auctions 1000..=1002; then bids; 10,000 events a second.
        assert!(matches!(&events[0], Event::Person(p) if p.id == 1000 && p.date_time == BASE_TIME));
        assert!(matches!(&events[3], Event::Auction(a) if a.id == 1002));
        assert!(matches!(&events[50], Event::Person(p) if p.id == 1001));
        assert_eq!(events[10_000].date_time(), BASE_TIME + 1_000);
        assert!(
            events.windows(2).all(|w| w[0].date_time() <= w[1].date_time()),
            "in time order"
        );
        let mut hot_bidder = 0;
        for e in &events {
            match e {
                Event::Bid(b) => {
                    assert!((100..=100_000_000).contains(&b.price), "{b:?}");
                    // Bidders are people made so far (or up to 10 ahead); auctions in flight.
                    assert!(b.bidder >= 1000 && b.bidder <= 1000 + 100_000 / 50 + 10, "{b:?}");
                    assert!(
                        b.auction >= 1000 && b.auction <= 1000 + 3 * 100_000 / 50 + 10,
                        "{b:?}"
                    );
                    if b.bidder % 100 == 1 {
                        hot_bidder += 1;
                    }
                    assert!((54..=81).contains(&b.extra.len()), "{}", b.extra.len());
                }
                Event::Auction(a) => {
                    assert!((10..15).contains(&a.category));
                    assert!(a.expires > a.date_time && a.reserve >= a.initial_bid);
                }
                Event::Person(p) => assert_eq!(p.credit_card.len(), 19),
            }
        }
        // Three quarters of the bids come from the hot bidder of their hundred people.
        let share = f64::from(hot_bidder) / 92_000.0;
        assert!((0.73..0.78).contains(&share), "{share}");
    }

    #[test]
    fn an_event_is_the_same_for_a_seed_and_differs_between_seeds() {
        let a = NexmarkConfig::default();
        let b = NexmarkConfig {
            seed: 7,
            ..NexmarkConfig::default()
        };
        assert_eq!(a.event(12_345), a.event(12_345));
        assert_ne!(a.event(12_345), b.event(12_345));
    }
}
