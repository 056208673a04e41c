//! Where a chart's labels go, in pixels: a scatter's points that coincide share one label,
//! and each label sits beside its dot, off every dot and every other label where there is
//! room; a log axis's tick labels keep their distance. Pure: no drawing, so the placement is
//! tested on its own.

/// A box in pixels: left, top, width, height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rect {
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) w: f64,
    pub(crate) h: f64,
}

impl Rect {
    fn overlap(&self, o: &Rect) -> f64 {
        let w = (self.x + self.w).min(o.x + o.w) - self.x.max(o.x);
        let h = (self.y + self.h).min(o.y + o.h) - self.y.max(o.y);
        if w > 0.0 && h > 0.0 {
            w * h
        } else {
            0.0
        }
    }

    fn outside(&self, area: &Rect) -> f64 {
        self.w * self.h - self.overlap(area)
    }
}

/// The points of `dots` (pixels) grouped: two points whose centres are `within` pixels of
/// each other (directly or through a chain) are one group. Groups keep the points' order.
pub(crate) fn group(dots: &[(f64, f64)], within: f64) -> Vec<Vec<usize>> {
    let mut of: Vec<usize> = (0..dots.len()).collect();
    fn root(of: &mut [usize], mut i: usize) -> usize {
        while of[i] != i {
            of[i] = of[of[i]];
            i = of[i];
        }
        i
    }
    for i in 0..dots.len() {
        for j in 0..i {
            let (dx, dy) = (dots[i].0 - dots[j].0, dots[i].1 - dots[j].1);
            if dx.hypot(dy) <= within {
                let (a, b) = (root(&mut of, i), root(&mut of, j));
                of[a.max(b)] = a.min(b);
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut first_of: Vec<Option<usize>> = vec![None; dots.len()];
    for i in 0..dots.len() {
        let r = root(&mut of, i);
        match first_of[r] {
            Some(g) => groups[g].push(i),
            None => {
                first_of[r] = Some(groups.len());
                groups.push(vec![i]);
            }
        }
    }
    groups
}

/// One label to place: the dot it names and its size in pixels.
pub(crate) struct Want {
    pub(crate) dot: (f64, f64),
    pub(crate) w: f64,
    pub(crate) h: f64,
}

/// A placed label: its box, and whether it sits away from its dot (then a leader line joins
/// them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Placed {
    pub(crate) rect: Rect,
    pub(crate) far: bool,
}

/// Places each label of `wants` beside its dot (dots of radius `r` and a pixel around, all of
/// `dots`): the first of the positions around it, nearest first, whose box stays in `area`
/// and covers no dot and no label placed before it; failing that, the one covering least.
pub(crate) fn place(wants: &[Want], dots: &[(f64, f64)], r: f64, area: Rect) -> Vec<Placed> {
    let dot_boxes: Vec<Rect> = dots
        .iter()
        .map(|&(x, y)| Rect {
            x: x - r - 1.0,
            y: y - r - 1.0,
            w: 2.0 * r + 2.0,
            h: 2.0 * r + 2.0,
        })
        .collect();
    let mut placed: Vec<Placed> = Vec::new();
    for want in wants {
        let mut best: Option<(f64, Placed)> = None;
        for (rect, far) in candidates(want, r) {
            let cost: f64 = dot_boxes
                .iter()
                .chain(placed.iter().map(|p| &p.rect))
                .map(|b| rect.overlap(b))
                .sum::<f64>()
                + 10.0 * rect.outside(&area);
            if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                best = Some((cost, Placed { rect, far }));
            }
            if cost == 0.0 {
                break;
            }
        }
        if let Some((_, p)) = best {
            placed.push(p);
        }
    }
    placed
}

/// Positions around a dot, nearest first: right, left, above, below and the corners, then
/// further out to the right and left in steps of a label's height.
fn candidates(want: &Want, r: f64) -> Vec<(Rect, bool)> {
    let (cx, cy, w, h) = (want.dot.0, want.dot.1, want.w, want.h);
    let gap = r + 3.0;
    let at = |x: f64, y: f64| Rect { x, y, w, h };
    let mut out = vec![
        (at(cx + gap, cy - h / 2.0), false),
        (at(cx - gap - w, cy - h / 2.0), false),
        (at(cx - w / 2.0, cy - gap - h), false),
        (at(cx - w / 2.0, cy + gap), false),
        (at(cx + r, cy - r - h), false),
        (at(cx + r, cy + r), false),
        (at(cx - r - w, cy - r - h), false),
        (at(cx - r - w, cy + r), false),
    ];
    for step in 1..=8 {
        let dy = step as f64 * (h + 2.0);
        for (x, y) in [
            (cx + gap + 8.0, cy - h / 2.0 - dy),
            (cx + gap + 8.0, cy - h / 2.0 + dy),
            (cx - gap - 8.0 - w, cy - h / 2.0 - dy),
            (cx - gap - 8.0 - w, cy - h / 2.0 + dy),
        ] {
            out.push((at(x, y), true));
        }
    }
    out
}

/// Ticks of a log axis over `lo..hi`, about `px` pixels long: labelled values at least `gap`
/// pixels apart (powers of ten first, then 2 and 5 times them, then the other 1..9 times),
/// ascending, and every 1..9 times a power of ten in the range (for light grid lines).
pub(crate) fn log_ticks(lo: f64, hi: f64, px: f64, gap: f64) -> (Vec<f64>, Vec<f64>) {
    let pos = |v: f64| (v.ln() - lo.ln()) / (hi.ln() - lo.ln()) * px;
    let mut all = Vec::new();
    for e in (lo.log10().floor() as i32)..=(hi.log10().ceil() as i32) {
        for m in 1..=9 {
            // Rounded to 4 significant digits: 0.30000000000000004 prints as 0.3.
            let v = f64::from(m) * 10f64.powi(e);
            let v = format!("{v:.3e}").parse::<f64>().unwrap_or(v);
            if (lo..=hi).contains(&v) {
                all.push((m, v));
            }
        }
    }
    let mut bold: Vec<f64> = Vec::new();
    for tier in [&[1][..], &[2, 5], &[3, 4, 6, 7, 8, 9]] {
        for &(_, v) in all.iter().filter(|(m, _)| tier.contains(m)) {
            if bold.iter().all(|&b| (pos(b) - pos(v)).abs() >= gap) {
                bold.push(v);
            }
        }
    }
    bold.sort_by(f64::total_cmp);
    (bold, all.into_iter().map(|(_, v)| v).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: Rect = Rect {
        x: 0.0,
        y: 0.0,
        w: 400.0,
        h: 300.0,
    };

    #[test]
    fn log_ticks_keep_their_distance() {
        // Four decades on 400 px: 100 px a decade, so 1, 2, 5 (30 and 40 px apart) fit.
        let (bold, light) = log_ticks(0.1, 1000.0, 400.0, 25.0);
        assert_eq!(bold[..4], [0.1, 0.2, 0.5, 1.0]);
        assert_eq!(light.len(), 4 * 9 + 1);
        // With 60 px between labels only the powers of ten.
        let (bold, _) = log_ticks(0.1, 1000.0, 400.0, 60.0);
        assert_eq!(bold, [0.1, 1.0, 10.0, 100.0, 1000.0]);
        // Under a decade on a long axis: every 1..9.
        let (bold, _) = log_ticks(0.7, 1.44, 300.0, 20.0);
        assert_eq!(bold, [0.7, 0.8, 0.9, 1.0]);
    }

    #[test]
    fn points_within_reach_of_each_other_are_one_group() {
        let dots = [(10.0, 10.0), (100.0, 100.0), (11.0, 12.0), (13.0, 14.0)];
        assert_eq!(group(&dots, 3.0), vec![vec![0, 2, 3], vec![1]]);
        assert_eq!(group(&dots, 0.5), vec![vec![0], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn labels_cover_no_dot_and_no_other_label() {
        // A tight cluster, as split-write K=1's six strategies at 2 segments and 13-18 us.
        let dots: Vec<(f64, f64)> = (0..6).map(|i| (200.0, 150.0 + 6.0 * i as f64)).collect();
        let wants: Vec<Want> = dots
            .iter()
            .map(|&dot| Want {
                dot,
                w: 50.0,
                h: 11.0,
            })
            .collect();
        let placed = place(&wants, &dots, 5.0, AREA);
        assert_eq!(placed.len(), 6);
        for (i, p) in placed.iter().enumerate() {
            for &(x, y) in &dots {
                let dot = Rect {
                    x: x - 5.0,
                    y: y - 5.0,
                    w: 10.0,
                    h: 10.0,
                };
                assert_eq!(p.rect.overlap(&dot), 0.0, "label {i} covers a dot: {p:?}");
            }
            for q in &placed[..i] {
                assert_eq!(p.rect.overlap(&q.rect), 0.0, "{p:?} covers {q:?}");
            }
            assert_eq!(p.rect.outside(&AREA), 0.0);
        }
        // The first sits right beside its dot.
        assert!(!placed[0].far);
    }

    #[test]
    fn a_label_at_the_right_edge_goes_to_the_left_of_its_dot() {
        let dots = [(395.0, 150.0)];
        let p = place(
            &[Want {
                dot: dots[0],
                w: 50.0,
                h: 11.0,
            }],
            &dots,
            5.0,
            AREA,
        );
        assert!(p[0].rect.x + p[0].rect.w <= 390.0, "{p:?}");
    }
}
