//! A line chart of several series (the noisy-neighbour and rate-limit sections), with the
//! same font handling as [`crate::chart`].

use crate::stack::{Res, err};
use plotters::prelude::*;
use std::path::Path;

/// Draws `series` (name, points) as lines on one chart; without `text`, no captions or
/// labels (the report describes the axes).
///
/// # Errors
/// When drawing fails.
pub fn draw(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    text: bool,
) -> Res<()> {
    let e = |x: &dyn std::fmt::Display| err(format!("chart: {x}"));
    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let points = || series.iter().flat_map(|(_, p)| p.iter()).filter(|(x, y)| x.is_finite() && y.is_finite());
    let max_x = points().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let max_y = points().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut b = ChartBuilder::on(&root);
    b.margin(20);
    if text {
        b.caption(title, ("sans-serif", 22)).x_label_area_size(40).y_label_area_size(60);
    }
    let mut chart = b.build_cartesian_2d(0.0..max_x, 0.0..max_y).map_err(|x| e(&x))?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc(x_desc).y_desc(y_desc);
    } else {
        mesh.disable_x_mesh().disable_y_mesh().x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|x| e(&x))?;
    let colors = [BLUE, RED, GREEN, MAGENTA, BLACK];
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let drawn = chart
            .draw_series(LineSeries::new(
                pts.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()),
                color.stroke_width(2),
            ))
            .map_err(|x| e(&x))?;
        if text {
            drawn.label(name.as_str()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
