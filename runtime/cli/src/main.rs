//! `floe`: plan, run and operate Floe jobs, with the jobs that ship with Floe. A user's crate has the
//! same `main` with its own registry (see `examples/user-job`).

fn main() -> std::process::ExitCode {
    floe::main(floe::jobs())
}
