//! PNG charts with plotters' bitmap backend. Text is drawn with a TrueType font read at run
//! time from Debian's fonts-dejavu-core; without it the charts are drawn without text and the
//! report describes the axes.

use crate::stack::{Res, err};
use plotters::prelude::*;
use std::path::Path;

const FONT_PATHS: [&str; 2] =
    ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf"];

/// Registers the font; false when none was found (charts then carry no text).
pub fn init_font() -> bool {
    for p in FONT_PATHS {
        if let Ok(bytes) = std::fs::read(p) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

fn e<E: std::fmt::Display>(x: E) -> crate::stack::Error {
    err(format!("chart: {x}"))
}

/// A latency CDF: x = ms, y = fraction of events.
///
/// # Errors
/// When drawing fails.
pub fn latency_cdf(path: &Path, sorted_ms: &[f64], text: bool) -> Res<()> {
    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let max = sorted_ms.last().copied().unwrap_or(1.0).max(1.0) * 1.05;
    let mut b = ChartBuilder::on(&root);
    b.margin(20);
    if text {
        b.caption("ingest -> first attempt at the receiver (CDF)", ("sans-serif", 22))
            .x_label_area_size(40)
            .y_label_area_size(50);
    }
    let mut chart = b.build_cartesian_2d(0.0..max, 0.0..1.0).map_err(e)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("latency, ms").y_desc("fraction of events");
    } else {
        mesh.disable_x_mesh().disable_y_mesh().x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(e)?;
    let n = sorted_ms.len().max(1) as f64;
    chart
        .draw_series(LineSeries::new(
            sorted_ms.iter().enumerate().map(|(i, v)| (*v, (i + 1) as f64 / n)),
            BLUE.stroke_width(2),
        ))
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Side-by-side bar panels: each panel a title and (label, value) bars.
///
/// # Errors
/// When drawing fails.
pub fn bar_panels(path: &Path, panels: &[(&str, Vec<(String, f64)>)], text: bool) -> Res<()> {
    let width = 420 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN];
    for (area, (title, bars)) in areas.iter().zip(panels) {
        let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.15;
        let n = bars.len().max(1);
        let mut b = ChartBuilder::on(area);
        b.margin(15);
        if text {
            b.caption(*title, ("sans-serif", 18)).x_label_area_size(40).y_label_area_size(60);
        }
        let mut chart = b.build_cartesian_2d(0.0..n as f64, 0.0..max).map_err(e)?;
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh().x_labels(0);
        if !text {
            mesh.y_labels(0);
        }
        mesh.draw().map_err(e)?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                let c = colors[i % colors.len()];
                Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, *v)], c.filled())
            }))
            .map_err(e)?;
        if text {
            chart
                .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                    Text::new(format_value(*v), (i as f64 + 0.2, *v + max * 0.05), ("sans-serif", 14))
                }))
                .map_err(e)?;
            chart
                .draw_series(bars.iter().enumerate().map(|(i, (label, v))| {
                    Text::new(label.clone(), (i as f64 + 0.2, *v + max * 0.11), ("sans-serif", 13))
                }))
                .map_err(e)?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
