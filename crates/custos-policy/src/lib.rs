//! custos-policy: the learned policies of Custos: the queue policy (seed
//! 000 §4.2, §5) and the GRU placement policy (seed 002, `placement`).
//!
//! For: the policy's feature vector and its normalisation, the integer
//! Q-network's reference forward pass (the kernel runs its C twin), the
//! model file, transitions and their reward, the replay memory and the DQN
//! trainer that turns transitions into a quantised network.
//!
//! Not for: anything in the kernel. The scheduler (`custos-sched`) fills
//! the features, runs the network, emits transitions and loads the weights
//! this crate produces; `custos train` drives the trainer.

pub mod dqn;
pub mod features;
pub mod model;
pub mod net;
pub mod placement;
pub mod quantize;
pub mod replay;
pub mod transition;
