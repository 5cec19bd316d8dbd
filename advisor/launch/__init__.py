"""The launch bundle for a plan candidate: `bundle` writes the accelerate/DeepSpeed/TRL configs, the
training script, launch.sh, sky.yaml and a README from `templates/`; `axolotl` the axolotl config when
the user planned from one; `caveats` what a bundle for a candidate differs in (a pure function of the
result, which the reports read too)."""
