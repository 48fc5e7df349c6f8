//! Stacked bar charts as inline SVG, drawn by a template from coordinates computed here: one
//! bar per day, one colour per series (agent, model, provider), a legend, and each bar's total
//! in its title (what a pointer or a screen reader gets).

use std::collections::{BTreeMap, BTreeSet};

use crate::store::read::DayCount;

/// Colours for the series, in order: each has a contrast of at least 3:1 against both the
/// light (#ffffff) and the dark (#0d1117) background, as non-text graphics need.
const PALETTE: &[&str] = &[
    "#4e79a7", "#c66a12", "#59a14f", "#e15759", "#3a8f8a", "#9a7d0a", "#b07aa1", "#d0568a",
    "#9c755f", "#7f7f7f",
];

/// Series beyond this many are summed into "other".
const MAX_SERIES: usize = 8;

pub(super) struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub color: &'static str,
    pub title: String,
}

pub(super) struct Label {
    pub x: f64,
    pub y: f64,
    pub text: String,
}

pub(super) struct Legend {
    pub color: &'static str,
    pub name: String,
    pub total: String,
}

/// A chart ready for the template.
pub(super) struct Chart {
    pub title: String,
    /// The title as an element id (`tokens-used-per-day`), naming the figure.
    pub id: String,
    pub width: f64,
    pub height: f64,
    pub rects: Vec<Rect>,
    pub x_labels: Vec<Label>,
    pub y_labels: Vec<Label>,
    pub grid: Vec<f64>,
    pub legend: Vec<Legend>,
    pub empty: bool,
    /// What the chart says, for a screen reader.
    pub summary: String,
}

/// `12.3k`, `4.5M`.
pub(super) fn short(n: f64) -> String {
    let a = n.abs();
    if a >= 1e9 {
        format!("{:.1}G", n / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", n / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{}", n.round() as i64)
    }
}

/// The days from `first` to `last` (`YYYY-MM-DD`), every one, so gaps show as gaps.
fn days_between(first: &str, last: &str) -> Vec<String> {
    let parse = |d: &str| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok();
    let (Some(mut d), Some(end)) = (parse(first), parse(last)) else {
        return vec![first.to_owned()];
    };
    let mut out = Vec::new();
    while d <= end && out.len() < 400 {
        out.push(d.format("%Y-%m-%d").to_string());
        match d.succ_opt() {
            Some(next) => d = next,
            None => break,
        }
    }
    if out.is_empty() {
        out.push(first.to_owned());
    }
    out
}

/// A stacked bar chart of `rows` (day, series, value) over the days from `first_day` to
/// `last_day`.
pub(super) fn stacked(
    title: &str,
    unit: &str,
    rows: &[DayCount],
    first_day: &str,
    last_day: &str,
) -> Chart {
    stacked_with(title, unit, rows, first_day, last_day, short)
}

/// [`stacked`], its values shown by `fmt` (cents as dollars, say).
pub(super) fn stacked_with(
    title: &str,
    unit: &str,
    rows: &[DayCount],
    first_day: &str,
    last_day: &str,
    fmt: fn(f64) -> String,
) -> Chart {
    let (width, height) = (720.0, 260.0);
    let (left, right, top, bottom) = (56.0, 8.0, 12.0, 36.0);
    let mut totals: BTreeMap<&str, i64> = BTreeMap::new();
    for r in rows {
        *totals.entry(&r.name).or_default() += r.value;
    }
    let mut names: Vec<(&str, i64)> = totals.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let kept: Vec<&str> = names.iter().take(MAX_SERIES).map(|n| n.0).collect();
    let series_of = |name: &str| -> String {
        if kept.contains(&name) {
            name.to_owned()
        } else {
            "other".to_owned()
        }
    };
    let days = days_between(first_day, last_day);
    let mut cells: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut order: Vec<String> = kept.iter().map(|s| (*s).to_owned()).collect();
    if names.len() > MAX_SERIES {
        order.push("other".into());
    }
    for r in rows {
        *cells
            .entry((r.day.clone(), series_of(&r.name)))
            .or_default() += r.value;
    }
    let day_total = |d: &str| -> i64 {
        order
            .iter()
            .map(|s| cells.get(&(d.to_owned(), s.clone())).copied().unwrap_or(0))
            .sum()
    };
    let max = days.iter().map(|d| day_total(d)).max().unwrap_or(0).max(1) as f64;
    // A round top for the scale.
    let step = {
        let raw = max / 4.0;
        let mag = 10f64.powf(raw.log10().floor());
        let n = raw / mag;
        mag * if n <= 1.0 {
            1.0
        } else if n <= 2.0 {
            2.0
        } else if n <= 5.0 {
            5.0
        } else {
            10.0
        }
    }
    // Counts are whole: no scale step below one.
    .max(1.0);
    let scale_top = (max / step).ceil() * step;
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let slot = plot_w / days.len().max(1) as f64;
    let bar_w = (slot * 0.8).max(1.0);
    let color = |s: &str| -> &'static str {
        let i = order.iter().position(|o| o == s).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    };
    let mut rects = Vec::new();
    let mut x_labels = Vec::new();
    let label_every = (days.len() / 8).max(1);
    for (i, d) in days.iter().enumerate() {
        let x = left + i as f64 * slot + (slot - bar_w) / 2.0;
        let mut y = top + plot_h;
        let total = day_total(d);
        for s in &order {
            let v = cells.get(&(d.clone(), s.clone())).copied().unwrap_or(0);
            if v == 0 {
                continue;
            }
            let h = v as f64 / scale_top * plot_h;
            y -= h;
            rects.push(Rect {
                x,
                y,
                w: bar_w,
                h: h.max(0.5),
                color: color(s),
                title: format!(
                    "{d}: {s} {} {unit} (day total {})",
                    fmt(v as f64),
                    fmt(total as f64)
                ),
            });
        }
        if i % label_every == 0 || i + 1 == days.len() {
            x_labels.push(Label {
                x: left + i as f64 * slot + slot / 2.0,
                y: height - bottom + 16.0,
                text: d.get(5..).unwrap_or(d).to_owned(),
            });
        }
    }
    let mut grid = Vec::new();
    let mut y_labels = Vec::new();
    let mut v = 0.0;
    while v <= scale_top + step / 2.0 {
        let y = top + plot_h - v / scale_top * plot_h;
        grid.push(y);
        y_labels.push(Label {
            x: left - 6.0,
            y: y + 4.0,
            text: fmt(v),
        });
        v += step;
    }
    let legend: Vec<Legend> = order
        .iter()
        .map(|s| Legend {
            color: color(s),
            name: s.clone(),
            total: fmt(cells
                .iter()
                .filter(|((_, n), _)| n == s)
                .map(|(_, v)| *v as f64)
                .sum()),
        })
        .collect();
    let grand: i64 = rows.iter().map(|r| r.value).sum();
    let distinct: BTreeSet<&str> = rows.iter().map(|r| r.day.as_str()).collect();
    Chart {
        title: title.to_owned(),
        id: title
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect::<Vec<_>>()
            .join("-"),
        width,
        height,
        summary: format!(
            "{title}: {} {unit} over {} days with activity, from {first_day} to {last_day}",
            fmt(grand as f64),
            distinct.len()
        ),
        empty: rows.is_empty(),
        rects,
        x_labels,
        y_labels,
        grid,
        legend,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dc(day: &str, name: &str, value: i64) -> DayCount {
        DayCount {
            day: day.into(),
            name: name.into(),
            value,
        }
    }

    /// WCAG's contrast ratio of two colours `#rrggbb`.
    fn contrast(a: &str, b: &str) -> f64 {
        let lum = |h: &str| {
            let c = |i: usize| {
                let v = f64::from(u8::from_str_radix(&h[i..i + 2], 16).unwrap()) / 255.0;
                if v <= 0.03928 {
                    v / 12.92
                } else {
                    ((v + 0.055) / 1.055).powf(2.4)
                }
            };
            0.2126 * c(1) + 0.7152 * c(3) + 0.0722 * c(5)
        };
        let (x, y) = (lum(a), lum(b));
        (x.max(y) + 0.05) / (x.min(y) + 0.05)
    }

    #[test]
    fn every_series_colour_stands_out_on_both_themes() {
        for c in PALETTE {
            assert!(contrast(c, "#ffffff") >= 3.0, "{c} on light");
            assert!(contrast(c, "#0d1117") >= 3.0, "{c} on dark");
        }
    }

    #[test]
    fn bars_stack_per_day_within_the_plot() {
        let rows = [
            dc("2026-11-01", "claude", 30),
            dc("2026-11-01", "codex", 10),
            dc("2026-11-03", "claude", 5),
        ];
        let c = stacked("Messages", "messages", &rows, "2026-11-01", "2026-11-03");
        assert_eq!(c.rects.len(), 3);
        assert_eq!(c.legend.len(), 2);
        assert_eq!(c.legend[0].name, "claude");
        // Three days, one of them empty; every bar inside the plot.
        assert_eq!(c.x_labels.len(), 3);
        for r in &c.rects {
            assert!(r.y >= 0.0 && r.y + r.h <= c.height, "{}", r.title);
        }
        // The first day's two parts are stacked: codex sits on claude.
        assert!((c.rects[1].y + c.rects[1].h - c.rects[0].y).abs() < 1e-9);
        assert!(!c.empty);
        assert!(stacked("x", "u", &[], "2026-11-01", "2026-11-01").empty);
        // A scale of whole counts, however small.
        let one = stacked(
            "x",
            "u",
            &[dc("2026-11-01", "a", 1)],
            "2026-11-01",
            "2026-11-01",
        );
        let labels: Vec<&str> = one.y_labels.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(labels, ["0", "1"]);
        assert_eq!(short(12_345.0), "12k");
        assert_eq!(short(1_500_000.0), "1.5M");
    }
}
