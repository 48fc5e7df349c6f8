//! The time zone reports count days in, and the day bounds users type.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Offset, TimeZone, Utc};

/// The system's zone (the `TZ` variable, else `/etc/localtime`), or a named IANA zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    Local,
    Named(chrono_tz::Tz),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    #[error(
        "`{0}` is not a time zone: use an IANA name (UTC, Europe/Berlin, America/New_York, Asia/Kolkata) or `local`"
    )]
    Zone(String),
    #[error(
        "`{0}` is not a day: use 2026-06-01, 20260601, today, yesterday, or an age in days or weeks (7d, 2w)"
    )]
    Day(String),
}

impl Zone {
    pub fn parse(s: &str) -> Result<Zone, ZoneError> {
        let t = s.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("local") {
            return Ok(Zone::Local);
        }
        if t.eq_ignore_ascii_case("utc") || t == "Z" {
            return Ok(Zone::Named(chrono_tz::UTC));
        }
        t.parse::<chrono_tz::Tz>()
            .map(Zone::Named)
            .map_err(|_| ZoneError::Zone(s.to_owned()))
    }

    /// How reports name it: the IANA name, or `local (+02:00)`.
    pub fn name(&self) -> String {
        match self {
            Zone::Named(tz) => tz.name().to_owned(),
            Zone::Local => {
                let off = chrono::Local::now().offset().fix();
                format!("local ({off})")
            }
        }
    }

    /// The calendar day of an instant (epoch ms) in this zone.
    pub fn day(&self, ms: i64) -> NaiveDate {
        let utc = DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default();
        match self {
            Zone::Local => utc.with_timezone(&chrono::Local).date_naive(),
            Zone::Named(tz) => utc.with_timezone(tz).date_naive(),
        }
    }

    /// The instant (epoch ms) a day starts in this zone (the first minute that exists, across a
    /// daylight-saving jump).
    pub fn start(&self, day: NaiveDate) -> i64 {
        fn first<T: TimeZone>(tz: &T, day: NaiveDate) -> i64 {
            let mut t = day.and_hms_opt(0, 0, 0).expect("midnight exists");
            for _ in 0..48 {
                if let Some(d) = tz.from_local_datetime(&t).earliest() {
                    return d.timestamp_millis();
                }
                t += Duration::minutes(30);
            }
            day.and_hms_opt(0, 0, 0)
                .expect("midnight exists")
                .and_utc()
                .timestamp_millis()
        }
        match self {
            Zone::Local => first(&chrono::Local, day),
            Zone::Named(tz) => first(tz, day),
        }
    }

    /// Today in this zone.
    pub fn today(&self) -> NaiveDate {
        self.day(Utc::now().timestamp_millis())
    }

    /// A day bound as users type it: `2026-06-01`, `20260601`, `today`, `yesterday`, or an age
    /// (`7d`: the day seven days before today; `2w`).
    pub fn parse_day(&self, s: &str) -> Result<NaiveDate, ZoneError> {
        let t = s.trim();
        let bad = || ZoneError::Day(s.to_owned());
        match t {
            "today" => return Ok(self.today()),
            "yesterday" => return Ok(self.today() - Duration::days(1)),
            _ => {}
        }
        if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
            return Ok(d);
        }
        if t.len() == 8
            && let Ok(d) = NaiveDate::parse_from_str(t, "%Y%m%d")
        {
            return Ok(d);
        }
        let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
        let n: i64 = num.parse().map_err(|_| bad())?;
        let days = match unit {
            "d" => n,
            "w" => n.checked_mul(7).ok_or_else(bad)?,
            _ => return Err(bad()),
        };
        if days > 365 * 200 {
            return Err(bad());
        }
        Ok(self.today() - Duration::days(days))
    }
}

/// The Monday that starts a day's ISO week.
pub fn week_start(d: NaiveDate) -> NaiveDate {
    d - Duration::days(d.weekday().num_days_from_monday() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_fall_in_the_chosen_zone() {
        // 2026-06-01 23:30 UTC.
        let t = Utc
            .with_ymd_and_hms(2026, 6, 1, 23, 30, 0)
            .unwrap()
            .timestamp_millis();
        let utc = Zone::parse("UTC").unwrap();
        let tokyo = Zone::parse("Asia/Tokyo").unwrap();
        let ny = Zone::parse("America/New_York").unwrap();
        assert_eq!(utc.day(t).to_string(), "2026-06-01");
        assert_eq!(tokyo.day(t).to_string(), "2026-06-02");
        assert_eq!(ny.day(t).to_string(), "2026-06-01");
        // Kolkata is +05:30: its day starts on a half hour (and on a quarter hour boundary).
        let kol = Zone::parse("Asia/Kolkata").unwrap();
        let d = NaiveDate::from_ymd_opt(2026, 6, 2).unwrap();
        let s = kol.start(d);
        assert_eq!(s % 900_000, 0);
        assert_eq!(
            DateTime::<Utc>::from_timestamp_millis(s)
                .unwrap()
                .to_rfc3339(),
            "2026-06-01T18:30:00+00:00"
        );
    }

    #[test]
    fn a_day_without_midnight_starts_at_its_first_minute() {
        // Santiago skipped 2022-09-11 00:00 (clocks went to 01:00).
        let z = Zone::parse("America/Santiago").unwrap();
        let d = NaiveDate::from_ymd_opt(2022, 9, 11).unwrap();
        assert_eq!(z.day(z.start(d)), d);
        assert_eq!(z.day(z.start(d) - 1), d.pred_opt().unwrap());
    }

    #[test]
    fn bounds_as_users_type_them() {
        let z = Zone::parse("UTC").unwrap();
        assert_eq!(z.parse_day("2026-06-01").unwrap().to_string(), "2026-06-01");
        assert_eq!(z.parse_day("20260601").unwrap().to_string(), "2026-06-01");
        assert_eq!(z.parse_day("7d").unwrap(), z.today() - Duration::days(7));
        assert_eq!(z.parse_day("1w").unwrap(), z.today() - Duration::days(7));
        for bad in [
            "2026-13-01",
            "last week",
            "-3d",
            "99999999999999999999d",
            "",
        ] {
            let e = z.parse_day(bad).unwrap_err().to_string();
            assert!(e.contains("is not a day"), "{bad}: {e}");
        }
        let e = Zone::parse("Mars/Olympus").unwrap_err().to_string();
        assert!(e.contains("`Mars/Olympus` is not a time zone"), "{e}");
        assert_eq!(
            week_start(NaiveDate::from_ymd_opt(2026, 6, 7).unwrap()).to_string(),
            "2026-06-01"
        );
    }
}
