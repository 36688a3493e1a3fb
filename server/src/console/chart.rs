//! The adoption chart: installs per UTC day as stacked bars, one colour per pack version,
//! drawn on the server as inline SVG (no script). Every number is also in a table beside
//! the chart, for screen readers and for reading exact values.

use maud::{Markup, html};

/// One stacked series: a pack version and its installs per day.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    /// Index into the palette of the stylesheet (`.c0` …), stable per version on a page.
    pub colour: usize,
    pub daily: Vec<u64>,
}

/// One piece of a bar: y, height, colour, label, installs.
type Segment<'a> = (f64, f64, usize, &'a str, u64);

/// Colours in the stylesheet (`.c0` to `.c7`).
pub const PALETTE: usize = 8;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 30.0;

/// The smallest of 1, 2, 5 × 10^k that is at least `n`.
fn nice(n: f64) -> u64 {
    let mut scale = 1u64;
    loop {
        for step in [1, 2, 5] {
            let candidate = step * scale;
            if candidate as f64 >= n {
                return candidate;
            }
        }
        match scale.checked_mul(10) {
            Some(next) => scale = next,
            None => return u64::MAX,
        }
    }
}

/// The y axis for values up to `max`: (top, step), a round step with at most 5 of them.
pub fn scale(max: u64) -> (u64, u64) {
    let step = nice(max as f64 / 5.0).max(1);
    let top = max.div_ceil(step).max(1).saturating_mul(step);
    (top, step)
}

/// A coordinate with one decimal.
fn px(v: f64) -> String {
    format!("{v:.1}")
}

/// `2026-12-01` → `12-01`.
fn short_day(day: &str) -> &str {
    day.get(5..).unwrap_or(day)
}

/// A stacked bar chart of `series` over `days`. `id` must be unique on the page (it names
/// the SVG's title and description for assistive technology).
pub fn stacked_bars(id: &str, title: &str, days: &[String], series: &[Series]) -> Markup {
    let totals: Vec<u64> = (0..days.len())
        .map(|d| {
            series
                .iter()
                .map(|s| s.daily.get(d).copied().unwrap_or(0))
                .fold(0u64, u64::saturating_add)
        })
        .collect();
    let (top, step) = scale(totals.iter().copied().max().unwrap_or(0));
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = plot_w / days.len().max(1) as f64;
    let bar = (slot * 0.62).min(56.0);
    let y_of = |value: u64| TOP + plot_h - plot_h * (value as f64 / top as f64);
    let ticks: Vec<u64> = (0..=top / step).map(|i| i * step).collect();
    let title_id = format!("{id}-title");
    let desc_id = format!("{id}-desc");
    let latest = days.len().checked_sub(1);
    let description = match latest {
        Some(last) => {
            let parts: Vec<String> = series
                .iter()
                .filter(|s| s.daily.get(last).copied().unwrap_or(0) > 0)
                .map(|s| format!("{} {}", s.label, s.daily[last]))
                .collect();
            format!(
                "Installs per UTC day, {} to {}. On {}: {} installs{}{}.",
                days[0],
                days[last],
                days[last],
                totals[last],
                if parts.is_empty() { "" } else { ": " },
                parts.join(", ")
            )
        }
        None => "No days to show.".to_string(),
    };
    // Per day: where its bar starts and its segments (y, height, colour, label, installs),
    // bottom up.
    let bars: Vec<(&str, f64, Vec<Segment<'_>>)> = days
        .iter()
        .enumerate()
        .map(|(d, day)| {
            let x = LEFT + slot * d as f64 + (slot - bar) / 2.0;
            let mut base = 0u64;
            let mut segments = Vec::new();
            for s in series {
                let n = s.daily.get(d).copied().unwrap_or(0);
                if n == 0 {
                    continue;
                }
                let top_of = base.saturating_add(n);
                let y = y_of(top_of);
                segments.push((y, y_of(base) - y, s.colour % PALETTE, s.label.as_str(), n));
                base = top_of;
            }
            (day.as_str(), x, segments)
        })
        .collect();
    html! {
        svg class="chart" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img"
            aria-labelledby={ (title_id) " " (desc_id) } {
            title id=(title_id) { (title) }
            desc id=(desc_id) { (description) }
            @for tick in ticks {
                @let y = y_of(tick);
                line class="grid" x1=(px(LEFT)) x2=(px(WIDTH - RIGHT)) y1=(px(y)) y2=(px(y)) {}
                text class="axis" x=(px(LEFT - 6.0)) y=(px(y + 4.0)) text-anchor="end" { (tick) }
            }
            @for (day, x, segments) in &bars {
                @for (y, height, colour, label, n) in segments {
                    rect class={ "c" (colour) } x=(px(*x)) y=(px(*y)) width=(px(bar)) height=(px(*height)) {
                        title { (day) ": " (label) ", " (n) " installs" }
                    }
                }
                text class="axis" x=(px(x + bar / 2.0)) y=(px(HEIGHT - BOTTOM + 18.0)) text-anchor="middle" {
                    (short_day(day))
                }
            }
            line class="baseline" x1=(px(LEFT)) x2=(px(WIDTH - RIGHT)) y1=(px(TOP + plot_h)) y2=(px(TOP + plot_h)) {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_has_round_steps_and_room_for_the_largest_bar() {
        assert_eq!(scale(0), (1, 1));
        assert_eq!(scale(1), (1, 1));
        assert_eq!(scale(5), (5, 1));
        assert_eq!(scale(12), (15, 5));
        assert_eq!(scale(25), (25, 5));
        assert_eq!(scale(412), (500, 100));
        let (top, _) = scale(u64::MAX / 2);
        assert!(top >= u64::MAX / 2);
    }

    #[test]
    fn bars_stack_to_the_day_total_and_carry_their_numbers() {
        let days: Vec<String> = ["2026-11-30", "2026-12-01"].map(String::from).into();
        let series = [
            Series {
                label: "1.1.0".into(),
                colour: 0,
                daily: vec![10, 6],
            },
            Series {
                label: "1.2.0".into(),
                colour: 1,
                daily: vec![0, 4],
            },
        ];
        let svg = stacked_bars("a", "Releases *", &days, &series).into_string();
        // 10 is the top of the scale: the first bar fills the plot.
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert!(svg.contains("2026-12-01: 1.2.0, 4 installs"), "{svg}");
        assert!(
            svg.contains("On 2026-12-01: 10 installs: 1.1.0 6, 1.2.0 4."),
            "{svg}"
        );
        assert!(svg.contains(r#"aria-labelledby="a-title a-desc""#));
    }

    #[test]
    fn labels_are_escaped() {
        let days = vec!["2026-12-01".to_string()];
        let series = [Series {
            label: "<script>".into(),
            colour: 0,
            daily: vec![1],
        }];
        let svg = stacked_bars("b", "<b>", &days, &series).into_string();
        assert!(!svg.contains("<script>") && !svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
    }
}
