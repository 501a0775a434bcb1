// SPDX-License-Identifier: GPL-2.0-only
//! Generates the Rust bindings of include/custos/policy_features.h, the
//! feature vector the scheduler's BPF side fills (src/features.rs includes
//! them), so its count, scale and order are written once, in C.
use std::{env, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let header = "../../include/custos/policy_features.h";
    println!("cargo:rerun-if-changed={header}");
    bindgen::Builder::default()
        .header(header)
        // CUSTOS_FEAT_NR_EVENT, not custos_feature_CUSTOS_FEAT_NR_EVENT.
        .prepend_enum_name(false)
        .generate()
        .expect("generating the bindings of include/custos/policy_features.h")
        .write_to_file(out.join("policy_features.rs"))
        .expect("writing the bindings of include/custos/policy_features.h");
}
