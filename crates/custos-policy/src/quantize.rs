//! Post-training quantisation: the trainer's float network (input x/128)
//! becomes the integer network the kernel runs (`net::QNet`), INT8 or INT4
//! weights, symmetric per-layer scales (seed 000 §4.2).
//!
//! Only the argmax matters to the scheduler, so the scales are chosen to keep
//! the integer Q-values proportional to the float ones (one positive factor,
//! `1 / (s2 · s_h)`), which leaves the argmax unchanged up to rounding:
//!
//! ```text
//! s1 = max|w1| / qmax        w1q = round(w1 / s1)       b1q = round(b1 · 128 / s1)
//!    acc = w1q · x + b1q ≈ z1 · 128 / s1          (x is the integer feature, 0..=128)
//! s_h = max relu(z1) over the calibration states / 127
//! requant = round(2^16 · s1 / (128 · s_h))  ⇒  h = (acc · requant) >> 16 ≈ relu(z1) / s_h
//! s2 = max|w2| / qmax        w2q = round(w2 / s2)       b2q = round(b2 / (s2 · s_h))
//!    q = w2q · h + b2q ≈ Q / (s2 · s_h)
//! ```
//!
//! That is the plain scheme. Given calibration states, `quantize` also tries
//! clipped weight ranges and bias correction (each layer's bias absorbs the
//! mean error rounding left behind) and keeps a variant only if it agrees
//! with the float network on more calibration states: at 8 bits the plain
//! scheme usually wins, at 4 bits (7 levels per weight) the variants turn a
//! coarse copy into a usable one.

use anyhow::{bail, Result};

use crate::features::{State, FEATURE_MAX, NR_FEATURES};
use crate::model::FloatNet;
use crate::net::{
    QNet, BIAS_LIMIT, HIDDEN_MAX, MAX_ACTIONS, MAX_HIDDEN, REQUANT_LIMIT, REQUANT_SHIFT,
};

/// The trainer's input scaling: features 0..=128 become 0.0..=1.0.
pub const INPUT_SCALE: f32 = FEATURE_MAX as f32;

/// Largest |quantised weight| for a weight width.
pub fn weight_max(weight_bits: u32) -> Result<i8> {
    match weight_bits {
        8 => Ok(127),
        4 => Ok(7),
        _ => bail!("{weight_bits}-bit weights; 4 and 8 are supported"),
    }
}

/// Shapes, sizes and finiteness of a float network; what `quantize`,
/// `Dqn::from_float` and a model file's resume path rely on.
pub fn check_float(float: &FloatNet) -> Result<()> {
    if float.hidden == 0 || float.hidden > MAX_HIDDEN {
        bail!(
            "float network with {} hidden units; 1 to {MAX_HIDDEN} supported",
            float.hidden
        );
    }
    if float.actions < 2 || float.actions > MAX_ACTIONS {
        bail!(
            "float network with {} actions; 2 to {MAX_ACTIONS} supported",
            float.actions
        );
    }
    let shapes = [
        ("w1", &float.w1, float.hidden * NR_FEATURES),
        ("b1", &float.b1, float.hidden),
        ("w2", &float.w2, float.actions * float.hidden),
        ("b2", &float.b2, float.actions),
    ];
    for (name, v, want) in shapes {
        if v.len() != want {
            bail!(
                "float network: {name} has {} values, the shape needs {want}",
                v.len()
            );
        }
        if let Some(x) = v.iter().find(|x| !x.is_finite()) {
            bail!("float network: {name} holds {x}, not a finite number");
        }
    }
    Ok(())
}

/// The float network's hidden pre-activations z1 for one state (input x/128).
fn float_hidden(float: &FloatNet, x: &State) -> Vec<f32> {
    float
        .w1
        .chunks_exact(NR_FEATURES)
        .zip(&float.b1)
        .map(|(row, &b)| {
            b + row
                .iter()
                .zip(x)
                .map(|(&w, &x)| w * (x as f32 / INPUT_SCALE))
                .sum::<f32>()
        })
        .collect()
}

/// The float network's Q-values for one state, in plain Rust (no candle):
/// what the quantiser aims at. A malformed network (see `check_float`)
/// gives a short or empty vector rather than a panic.
pub fn float_q_values(float: &FloatNet, x: &State) -> Vec<f32> {
    let h: Vec<f32> = float_hidden(float, x)
        .into_iter()
        .map(|z| z.max(0.0))
        .collect();
    if h.is_empty() {
        return Vec::new();
    }
    float
        .w2
        .chunks_exact(h.len())
        .zip(&float.b2)
        .map(|(row, &b)| b + row.iter().zip(&h).map(|(&w, &h)| w * h).sum::<f32>())
        .collect()
}

/// Index of the first largest value, as `net::argmax` (ties go low).
pub fn argmax_f32(q: &[f32]) -> usize {
    crate::net::argmax(q)
}

/// The float network's greedy action.
pub fn float_action(float: &FloatNet, x: &State) -> usize {
    argmax_f32(&float_q_values(float, x))
}

/// Symmetric per-layer scale: the largest |w| maps to qmax. An all-zero
/// layer quantises to zeros whatever the scale, so 1.0 stands in.
fn layer_scale(w: &[f32], qmax: i8) -> f64 {
    let m = w.iter().fold(0f32, |m, w| m.max(w.abs())) as f64;
    if m > 0.0 {
        m / qmax as f64
    } else {
        1.0
    }
}

fn quantize_weights(w: &[f32], scale: f64, qmax: i8) -> Vec<i8> {
    w.iter()
        .map(|&w| {
            (w as f64 / scale)
                .round()
                .clamp(-(qmax as f64), qmax as f64) as i8
        })
        .collect()
}

fn quantize_bias(b: f64) -> i32 {
    b.round().clamp(-(BIAS_LIMIT as f64), BIAS_LIMIT as f64) as i32
}

/// The largest hidden activation the integer network must represent, or
/// None when every unit is dead on every input.
///
/// The calibration states' largest relu(z1). When there are none, or every
/// unit is dead on all of them, the largest relu(z1) any input in the
/// feature box [0, 128]^11 can reach (Σ positive weights + bias) stands in:
/// it never saturates, at the cost of resolution.
fn hidden_range(float: &FloatNet, calibration: &[State]) -> Option<f64> {
    let observed = calibration
        .iter()
        .flat_map(|x| float_hidden(float, x))
        .fold(0f32, |m, z| m.max(z)) as f64;
    if observed > 0.0 {
        return Some(observed);
    }
    let bound = float
        .w1
        .chunks_exact(NR_FEATURES)
        .zip(&float.b1)
        .map(|(row, &b)| b as f64 + row.iter().map(|&w| w.max(0.0) as f64).sum::<f64>())
        .fold(0f64, f64::max);
    (bound > 0.0).then_some(bound)
}

/// Weight ranges tried below the largest |w| when calibration states are
/// given: clipping a few outlying weights buys resolution for all others,
/// which at 4 bits often matters more.
const CLIPS: [f64; 6] = [1.0, 0.85, 0.7, 0.55, 0.4, 0.3];
/// Calibration states the search evaluates each candidate on, at most (an
/// even subsample of a larger set), which bounds its cost.
const SEARCH_STATES: usize = 4096;

/// One quantisation of the scheme: the weight ranges clipped to `clip1`,
/// `clip2` of the largest |w| (1.0: none), and with or without bias
/// correction.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Choice {
    clip1: f64,
    clip2: f64,
    correct: bool,
}

const PLAIN: Choice = Choice {
    clip1: 1.0,
    clip2: 1.0,
    correct: false,
};

/// The scheme in the module doc with one `Choice`. `range` is the hidden
/// range (`hidden_range`); `mean_x` the calibration states' mean input and
/// `calibration` their sample, both used only for bias correction.
fn quantize_as(
    float: &FloatNet,
    qmax: i8,
    range: Option<f64>,
    choice: Choice,
    mean_x: Option<&[f64; NR_FEATURES]>,
    calibration: &[State],
) -> QNet {
    let input_max = FEATURE_MAX as f64;
    let shift = (1u64 << REQUANT_SHIFT) as f64;

    let s1 = layer_scale(&float.w1, qmax) * choice.clip1;
    let w1 = quantize_weights(&float.w1, s1, qmax);
    let s2 = layer_scale(&float.w2, qmax) * choice.clip2;
    let w2 = quantize_weights(&float.w2, s2, qmax);

    // b1 in accumulator units; with bias correction, plus the mean over the
    // calibration inputs of what rounding w1 lost (Σ_i (w1/s1 − w1q) · x̄_i),
    // so each unit's pre-activation is right on average: at 4 bits many
    // small weights round to 0 and their average input would go missing.
    let acc_bias: Vec<f64> = float
        .b1
        .iter()
        .enumerate()
        .map(|(j, &b)| {
            let lost = match (choice.correct, mean_x) {
                (true, Some(mean)) => (0..NR_FEATURES)
                    .map(|i| {
                        (float.w1[j * NR_FEATURES + i] as f64 / s1 - w1[j * NR_FEATURES + i] as f64)
                            * mean[i]
                    })
                    .sum(),
                _ => 0.0,
            };
            b as f64 * input_max / s1 + lost
        })
        .collect();

    let Some(range) = range else {
        // Every unit is dead on every input (true acc ≤ 0, and rounding
        // moves acc by far less than 2^16), so h ≡ 0 with the smallest
        // requant and the Q-values are the output biases alone: any
        // positive scale keeps their order; 2^20 for the largest keeps
        // their resolution well inside BIAS_LIMIT.
        let m = float.b2.iter().fold(0f32, |m, b| m.max(b.abs())) as f64;
        let scale = if m > 0.0 { m / (1 << 20) as f64 } else { 1.0 };
        let b1 = float
            .b1
            .iter()
            .map(|&b| quantize_bias(b as f64 * input_max / s1))
            .collect();
        let b2 = float
            .b2
            .iter()
            .map(|&b| quantize_bias(b as f64 / scale))
            .collect();
        return QNet {
            hidden: float.hidden,
            actions: float.actions,
            weight_max: qmax,
            w1,
            b1,
            requant: 1,
            w2,
            b2,
        };
    };

    let s_h = range / HIDDEN_MAX as f64;
    let requant = (shift * s1 / (input_max * s_h))
        .round()
        .clamp(1.0, REQUANT_LIMIT as f64) as u32;
    // The hidden scale the integer network really has once requant is
    // rounded (and perhaps clamped); the output layer is scaled by it, not
    // by the ideal s_h, so the two layers stay consistent.
    let s_h = shift * s1 / (input_max * requant as f64);
    let b1 = acc_bias.iter().map(|&b| quantize_bias(b)).collect();
    let out_scale = s2 * s_h;
    let b2 = float
        .b2
        .iter()
        .map(|&b| quantize_bias(b as f64 / out_scale))
        .collect();
    let mut q = QNet {
        hidden: float.hidden,
        actions: float.actions,
        weight_max: qmax,
        w1,
        b1,
        requant,
        w2,
        b2,
    };

    if choice.correct && !calibration.is_empty() {
        // Output bias correction: the mean over the calibration states of
        // Q_k / out_scale − q_k, what the hidden and w2 rounding shifted
        // action k's value by on average. A per-action offset is exactly
        // what flips an argmax between two close actions.
        let mut err = vec![0f64; float.actions];
        for x in calibration {
            let iq = q.q_values(x);
            for (k, fq) in float_q_values(float, x).into_iter().enumerate() {
                err[k] += fq as f64 / out_scale - iq[k] as f64;
            }
        }
        for (b, e) in q.b2.iter_mut().zip(err) {
            *b = quantize_bias(*b as f64 + e / calibration.len() as f64);
        }
    }
    q
}

/// Quantises a float network to `weight_bits` (8 or 4) bit weights; the
/// hidden activations' range is calibrated on `calibration` (the states the
/// network will see, e.g. the training states). The result passes
/// `QNet::validate`.
///
/// Without calibration states this is the scheme in the module doc. With
/// them, variants of it (clipped weight ranges, `CLIPS`; bias correction)
/// compete with the plain scheme on agreement with the float network over
/// the calibration states, and the plain scheme is kept unless one does
/// strictly better.
pub fn quantize(float: &FloatNet, weight_bits: u32, calibration: &[State]) -> Result<QNet> {
    let qmax = weight_max(weight_bits)?;
    check_float(float)?;
    let range = hidden_range(float, calibration);

    let mut best = quantize_as(float, qmax, range, PLAIN, None, &[]);
    if !calibration.is_empty() && range.is_some() {
        let stride = calibration.len().div_ceil(SEARCH_STATES);
        let sample: Vec<State> = calibration.iter().step_by(stride).copied().collect();
        let want: Vec<usize> = sample.iter().map(|x| float_action(float, x)).collect();
        let agree = |q: &QNet| {
            sample
                .iter()
                .zip(&want)
                .filter(|(x, &a)| q.action(x) == a)
                .count()
        };
        let mut mean_x = [0f64; NR_FEATURES];
        for x in calibration {
            for (m, &v) in mean_x.iter_mut().zip(x) {
                *m += v as f64;
            }
        }
        mean_x
            .iter_mut()
            .for_each(|m| *m /= calibration.len() as f64);

        let mut best_agree = agree(&best);
        for correct in [false, true] {
            for clip1 in CLIPS {
                for clip2 in CLIPS {
                    let choice = Choice {
                        clip1,
                        clip2,
                        correct,
                    };
                    if choice == PLAIN {
                        continue;
                    }
                    let q = quantize_as(float, qmax, range, choice, Some(&mean_x), &sample);
                    let a = agree(&q);
                    if a > best_agree {
                        (best, best_agree) = (q, a);
                    }
                }
            }
        }
    }
    best.validate()?;
    Ok(best)
}

/// The plain scheme alone, calibrated: the baseline `quantize` improves on
/// (tests report both).
#[cfg(test)]
pub(crate) fn quantize_plain(
    float: &FloatNet,
    weight_bits: u32,
    calibration: &[State],
) -> Result<QNet> {
    let qmax = weight_max(weight_bits)?;
    check_float(float)?;
    let q = quantize_as(
        float,
        qmax,
        hidden_range(float, calibration),
        PLAIN,
        None,
        &[],
    );
    q.validate()?;
    Ok(q)
}

/// Share of `states` on which the integer network picks the float
/// network's action (ties to the lowest queue on both sides). NaN when
/// there are no states or either network is malformed, so that no
/// threshold test passes by accident.
pub fn agreement(float: &FloatNet, q: &QNet, states: &[State]) -> f64 {
    if states.is_empty()
        || check_float(float).is_err()
        || q.validate().is_err()
        || float.actions != q.actions
    {
        return f64::NAN;
    }
    let same = states
        .iter()
        .filter(|x| float_action(float, x) == q.action(x))
        .count();
    same as f64 / states.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{FEAT_AVAILABILITY, FEAT_NR_EVENT};

    const P14: f32 = 1.0 / 16384.0; // 2^-14

    /// A network built so every quantisation step is exact: s1 = 2^-7
    /// (set by unit 2, which is dead on every input), s_h = 2^-14 (the
    /// calibration's largest z1 is 127 · 2^-14), requant = 2^16, and the
    /// integer Q-values are the float ones times 127 · 2^14.
    ///   q0 = availability, q1 = nr_event − 32, q2 = 40 (in units of 2^-14).
    fn exact_net() -> FloatNet {
        let mut w1 = vec![0f32; 3 * NR_FEATURES];
        w1[FEAT_NR_EVENT] = 1.0 / 128.0;
        w1[NR_FEATURES + FEAT_AVAILABILITY] = 1.0 / 128.0;
        w1[2 * NR_FEATURES] = 127.0 / 128.0;
        FloatNet {
            hidden: 3,
            actions: 3,
            w1,
            b1: vec![-32.0 * P14, 0.0, -1.0],
            w2: vec![0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            b2: vec![0.0, 0.0, 40.0 * P14],
        }
    }

    fn state(nr_event: u8, availability: u8, other: u8) -> State {
        let mut x = [other; NR_FEATURES];
        x[FEAT_NR_EVENT] = nr_event;
        x[FEAT_AVAILABILITY] = availability;
        x
    }

    #[test]
    fn an_exactly_representable_network_keeps_every_decision() {
        let float = exact_net();
        let calibration = [state(127, 127, 128), state(0, 0, 0)];
        let q = quantize(&float, 8, &calibration).unwrap();
        assert_eq!(q.requant, 1 << 16);
        assert_eq!(q.weight_max, 127);
        assert_eq!(
            (
                q.w1[FEAT_NR_EVENT],
                q.w1[NR_FEATURES + FEAT_AVAILABILITY],
                q.w1[2 * NR_FEATURES]
            ),
            (1, 1, 127)
        );
        // b1 · 128 / s1, exactly.
        assert_eq!(q.b1, vec![-32, 0, -16384]);
        assert_eq!(q.w2, vec![0, 127, 0, 127, 0, 0, 0, 0, 0]);
        assert_eq!(q.b2, vec![0, 0, 40 * 127]);

        let mut states = Vec::new();
        for e in 0..=127u8 {
            for a in 0..=127u8 {
                states.push(state(e, a, (e ^ a) % 129));
            }
        }
        for x in &states {
            let fq = float_q_values(&float, x);
            let iq = q.q_values(x);
            for k in 0..3 {
                assert_eq!(
                    iq[k] as f64,
                    fq[k] as f64 * 127.0 * 16384.0,
                    "state {x:?} action {k}"
                );
            }
        }
        assert_eq!(agreement(&float, &q, &states), 1.0);
        // The three actions all occur (ties included: a = e − 32 picks 0).
        for k in 0..3 {
            assert!(states.iter().any(|x| q.action(x) == k));
        }
    }

    #[test]
    fn bad_requests_are_errors() {
        let float = exact_net();
        for bits in [0, 2, 7, 16] {
            assert!(quantize(&float, bits, &[])
                .unwrap_err()
                .to_string()
                .contains("4 and 8"));
        }
        let mut bad = float.clone();
        bad.w2.pop();
        assert!(quantize(&bad, 8, &[])
            .unwrap_err()
            .to_string()
            .contains("w2 has 8"));
        let mut bad = float.clone();
        bad.b1[0] = f32::NAN;
        assert!(quantize(&bad, 8, &[])
            .unwrap_err()
            .to_string()
            .contains("not a finite"));
        let mut bad = float.clone();
        bad.actions = 9;
        assert!(quantize(&bad, 4, &[]).is_err());
        // Malformed inputs to agreement: NaN, never a pass.
        assert!(agreement(&bad, &quantize(&float, 8, &[]).unwrap(), &[state(1, 2, 3)]).is_nan());
        assert!(agreement(&float, &quantize(&float, 8, &[]).unwrap(), &[]).is_nan());
    }

    #[test]
    fn without_calibration_the_hidden_range_is_the_input_box_bound() {
        let float = exact_net();
        // Largest z1 over [0,128]^11: unit 1 at availability 128 = 128 · 2^-14.
        let q = quantize(&float, 8, &[]).unwrap();
        let s_h = 128.0 * P14 as f64 / 127.0;
        assert_eq!(
            q.requant,
            ((1u64 << 16) as f64 / 128.0 / 128.0 / s_h).round() as u32
        );
        // Nothing saturates at the top of the range.
        let x = state(128, 128, 0);
        assert_eq!(q.action(&x), float_action(&float, &x));
        // A network with every unit dead everywhere still quantises.
        let mut dead = float.clone();
        dead.b1 = vec![-10.0; 3];
        let q = quantize(&dead, 4, &[x]).unwrap();
        assert_eq!((q.weight_max, q.requant), (7, 1));
        assert_eq!(&q.q_values(&x)[..3], &[0, 0, 1 << 20]);
        assert_eq!(q.action(&x), float_action(&dead, &x));
    }

    #[test]
    fn the_search_never_loses_to_the_plain_scheme_and_rescues_int4() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(9);
        let (hidden, actions) = (48, 4);
        let mut r = |n: usize, a: f32| (0..n).map(|_| rng.gen_range(-a..a)).collect::<Vec<f32>>();
        // Like a trained Q-network: every action's value is a large shared
        // part plus a small difference, and the argmax lives in the
        // difference, which per-row rounding of w2 disturbs.
        let shared = r(hidden, 0.5);
        let w2 = r(actions * hidden, 0.05)
            .iter()
            .enumerate()
            .map(|(i, d)| shared[i % hidden] + d)
            .collect();
        let float = FloatNet {
            hidden,
            actions,
            w1: r(hidden * NR_FEATURES, 1.0),
            b1: r(hidden, 0.5),
            w2,
            b2: r(actions, 0.05).iter().map(|d| 3.0 + d).collect(),
        };
        let mut rng = StdRng::seed_from_u64(10);
        let states: Vec<State> = (0..2000)
            .map(|_| std::array::from_fn(|_| rng.gen_range(0..=FEATURE_MAX)))
            .collect();
        for bits in [8, 4] {
            let plain = quantize_plain(&float, bits, &states).unwrap();
            let q = quantize(&float, bits, &states).unwrap();
            let (a_plain, a) = (
                agreement(&float, &plain, &states),
                agreement(&float, &q, &states),
            );
            println!("random network, INT{bits}: plain {a_plain:.3}, searched {a:.3}");
            assert!(
                a >= a_plain,
                "INT{bits}: the search kept a worse network ({a} < {a_plain})"
            );
            if bits == 4 {
                // Here 4-bit rounding of w2 swamps the differences (about
                // 25 % agreement); clipping and bias correction recover most.
                assert!(a > a_plain + 0.2, "INT4: searched {a}, plain {a_plain}");
            }
        }
    }

    #[test]
    fn int4_keeps_the_sign_structure() {
        let float = exact_net();
        let q = quantize(&float, 4, &[state(127, 127, 0)]).unwrap();
        q.validate().unwrap();
        assert!(q.w1.iter().chain(&q.w2).all(|w| w.abs() <= 7));
        // The nr_event and availability weights (1/127 of the largest) round to 0 at 4 bits.
        assert_eq!(q.w1[FEAT_NR_EVENT], 0);
        assert_eq!(q.w2[1], 7);
    }
}
