#!/usr/bin/env bash
# sfb.torch on the patterns of real training loops (test/python/
# torch_patterns.py under `sfb launch -n 4`), each against one process on the
# global minibatches, the replicas bit-identical after every step: frozen
# layers mid-run, a layer no rank uses any more, a head some ranks use,
# validation passes, clip_grad_norm_ after backward() (Horovod's way too),
# per-rank sample counts with zeros, join() with uneven shards,
# zero_grad(set_to_none=False), dense
# gradients in buckets that leave during backward, the forward under
# torch.autocast, activation checkpointing, a penalty on the weights, a
# gradient penalty, a weight used transposed too, BatchNorm in training
# mode, parametrized weights (spectral norm, orthogonal), gradient hooks on
# parameters (Tensor.register_hook: a scale, clamps, a watcher), a GAN's
# alternating steps under one optimizer, all
# of them at once; step(closure) (LBFGS's line search); a contrastive loss
# over the global batch (sft.allgather; each rank's own negatives: warned); sequences padded per minibatch,
# longer than the first step's (the job's bound raised); a mixture of
# experts; MAML's meta-gradient (torch.autograd.grad with respect to the
# parameters, create_graph); a loss's parameters outside the model; Hugging
# Face's fine-tuning loop on a small BERT; a mean cross_entropy over the
# tokens each rank keeps (ignore_index, or a masked mean by hand: warned
# without set_samples); sequences padded apart into a bidirectional GRU
# or unmasked attention (warned); rank 0's
# validations in eval(); an inf input on one rank (the step skipped as one
# process skips it); 300 Adam steps
# bit-identical; and what must fail fast: a module whose forward differs by
# mode left in eval() on some ranks (and a dropout's p changed on one),
# a rank out of data without join(), a rank-0-only checkpoint (and a run
# going back to a checkpoint mid-run: exact on every rank, refused on some), a .grad
# clipped under staleness, a parameter group added after wrapping, an
# InstanceNorm keeping running statistics in training mode and a BatchNorm
# inside join() or at staleness 1 (then BatchNorm in training mode: exact),
# torch.autograd.grad with respect to a weight sfb carries by factors (after
# the first step), a
# penalty on the weights first added at step 3; a DistributedOptimizer per
# model (a DCGAN's, an encoder's and a decoder's), and a model fed by one
# whose optimizer is not wrapped; two phases of fine-tuning, the second's
# new optimizer in a new job (one made while training is refused, saying so);
# a buffer updated from each rank's own data (refused, named; exact when
# updated from every rank's); learning-rate schedulers stepped on one rank
# only, a step one rank skipped and a layer one rank froze (refused naming lr
# and its values, the steps taken, the layer), ReduceLROnPlateau on the
# ranks' mean validation loss (exact).
# Usage: torch_patterns.sh SFB RUN_PY TORCH_PATTERNS_PY [long]
# (long, suite long: more optimizers for the patterns above and 300 steps)
set -uo pipefail
SFB=$1; PY=$2; JOB=$3; PART=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" --check || exit 77
"$PY" --check torch || { echo "skipped: no torch (install python3-torch)"; exit 77; }

# (plain route, uneven, join, a momentum closure and seq2seq without join:
# suite long, each covered here by the cases that combine them)
cases=(
  # weights computed from parameters (a spectral norm's power iteration
  # advances at every read of fc2.weight: wrapping once read it); gradient
  # hooks (run on the reduced gradient, as one process runs them)
  "exact --validate --route --parametrize --hooks"
  # clipping as Horovod's loop writes it (synchronize, clip, skip_synchronize)
  "exact --clip --hvd"
  # .grad replaced after backward() (gradient surgery), zeroed in place next
  "exact --no-zero --freeze --surgery --opt momentum"
  # dense gradients besides the factors in the first step: those layers go
  # densely (an L2 penalty on every weight and a gradient penalty through
  # double backward: all; fc1's weight transposed as a tied decoder's: long)
  "exact --uneven --penalty --gradpen --opt sgd"
  # a BatchNorm in training mode: every rank's statistics (SyncBatchNorm's)
  "exact --batchnorm --uneven --clip --freeze --route --buckets --opt momentum"
  # bfloat16 on the wire: one process's values within its rounding (seen 2e-3)
  "exact --dense-bf16 --sync fms --buckets --freeze --opt momentum --tol 2e-2"
  # torch.autocast (bfloat16): the float32 sums of the bf16 products one
  # process rounds (seen 7e-8 from that reference), and within bf16
  # rounding of one autocast process; per-rank sample counts weight each
  # rank's bf16 output gradients differently than one global mean: bf16
  # apart (seen 1e-2)
  "exact --autocast --freeze --route --clip --buckets --opt adam"
  "exact --checkpoint --freeze --validate --opt momentum"
  # step(closure): a reduction per call, the loss it returns the ranks' mean
  # (LBFGS's line search and stopping tests decide as one process's. At lr
  # 1.0 (torch's default) the line search's branches are no near ties here:
  # within 3e-6 of one process with every OpenBLAS kernel, torch 1.13 and
  # 2.6; at lr 0.2 its cubic step flips on rounding alone, 0.1 apart)
  "exact --closure --opt lbfgs --steps 5 --tol 1e-4"
  # sharpness-aware minimization (SAM): a backward, then step(closure) with
  # the second pass at the perturbed weights
  "exact --closure --opt sam --uneven --clip --route"
  # (inside join(): refused, naming the rank that joined)
  "closurejoin --opt momentum"
  # a parameter changed on one rank only: refused after step 4; repaired
  # once from the majority at a later check, refused when it differs again
  "rankedit --opt momentum"
  # SAM stepped by first_step/second_step (no step() of the wrapped
  # optimizer): exact, the replica checks by the reductions (refused at the
  # 32nd for a parameter changed on rank 1)
  samhand
  "exact --freeze --unused --route --validate --clip --uneven --join --opt momentum --hooks"
  nojoin loadstate staleclip addgroup batchnorm autogradw "latedense --opt momentum" gan
  # rank 1's own exception inside `finally: shutdown()`: the others name it;
  # hooks clamping activations' gradients (P times one process's): warned;
  # max_samples otherwise on one rank: refused naming it
  raised acthooks settings
  # a DistributedOptimizer per model: PyTorch's DCGAN loop as written (and
  # refused with the generator's optimizer left unwrapped, or the
  # discriminator's); an encoder's and a decoder's stepped after one
  # backward (ranks joining early); ranks stepping other optimizers: refused
  dcgan foreign "seq2seq --join" earlystop
  # fine-tuning in two phases, a new optimizer for the second: a new job
  phases
  # a buffer updated from each rank's own minibatch: refused; from every
  # rank's data (sft.allreduce): exact
  buffers
  # sft.allgather_object, objects over an allgather's 1 MiB too; sft.barrier;
  # sft.allreduce of other shapes on some rank: refused naming both; ranks in
  # different collectives (barrier() against allgather_object(), an
  # allreduce() on rank 0 alone): named as the program called them
  gather calls
  # a StepLR stepped on rank 0 alone, a step skipped on rank 1 (at a replica
  # check's step), a layer frozen on rank 1 alone: refused naming lr, the
  # steps, the layer; ReduceLROnPlateau on the ranks' mean validation loss:
  # exact
  "schedules --opt momentum"
  # max_norm tables looked up on each rank's own ids (and a validation shard
  # without gradients): every rank renormalizes the others' rows; a tied
  # decoder reading the table whole first: refused
  "maxnorm --uneven --join --opt momentum"
  # minibatches of unequal sizes without set_samples, a loss summed over the
  # samples, a sum beside a mean, a statistic over each rank's own samples
  # (the root of a mean loss, a batch entropy, topk, a norm, an MoE's
  # balance on each rank's fractions), a mean times a number each rank
  # computed from its own minibatch (its loss, its accuracy, task weights)
  # or drew (mixup's lambda), FixMatch's mean over each rank's confident
  # samples beside the supervised mean: rank 0 warns, once; over gathered
  # rows, the ranks' fractions or numbers, a weight per rank in proportion
  # to its samples: exact
  unequal
  # CLIP's loss over the global batch (sft.allgather, differentiable), ranks
  # of unequal sample counts and none: one process's; over each rank's own
  # rows: warned; Barlow Twins (through its BatchNorm) likewise
  "contrastive --uneven --opt adam"
  # dynamic padding: sequences padded to each minibatch's longest, longer
  # from step to step than the first step's (the job's bound raised); past
  # it at staleness 1: refused naming max_samples
  "varlen --uneven"
  # back to step 10's checkpoint at step 16 (model and optimizer), the
  # learning rate halved: exact; loads on some ranks only: refused
  "rollback --opt momentum --uneven"
  # a mixture of experts (top-1 routing: the experts' counts differ from
  # rank to rank), its load-balancing loss over the ranks' summed counts:
  # exact, and no unequal-minibatches warning
  "moe --opt momentum"
  # MAML: the inner step's torch.autograd.grad(create_graph=True) with
  # respect to the parameters, from the first step (a convolution and two
  # Linears then go densely, torch forming their gradients): exact; tasks as
  # many as each rank's data gives, set_samples(their number): exact, no
  # warning (the bias's gradient is rounding's: 1.2e-5 on some BLAS kernels)
  maml "maml --uneven --tol 1e-4"
  # the optimizer holds a loss's parameters (a Linear, a temperature) and a
  # plain leaf of task weights outside the model: exact
  "losshead --uneven"
  # Hugging Face's fine-tuning loop (a small BERT: AdamW groups, warmup,
  # micro-batches padded per rank, clipping, evaluations, the best model
  # saved whole and its state reloaded on every rank): exact (AdamW magnifies
  # rounding where a gradient is tiny: seen 6e-7)
  "finetune --steps 12 --tol 5e-5"
  # a mean cross_entropy over the tokens a padded minibatch keeps
  # (ignore_index; a masked mean by hand): without set_samples rank 0 warns
  # naming each rank's count; with it (label smoothing, class weights,
  # micro-batches, the mean by hand) exact
  tokens
  # sequences padded per rank to other lengths into a bidirectional GRU
  # and attention without a mask: rank 0 warns naming each rank's length;
  # packed, exact
  padding
  # rank 0's validations in eval() then train(): exact; a module whose
  # forward differs by mode left in eval() on some ranks, a dropout's p
  # halved on one: refused, named
  modes
  # an inf input on one rank at two steps: every rank's .grad not finite
  # there, so a loss scale kept as GradScaler keeps it skips those steps as
  # one process does (exact); at staleness 1 refused on that rank
  "nonfinite --opt momentum"
)
if [ "$PART" = long ]; then
  cases=("exact --route" "exact --uneven" "exact --join" seq2seq
    "exact --closure --opt momentum --uneven --clip --freeze"
    "exact --freeze" "exact --clip --opt adamw"
    "exact --autocast --uneven --opt sgd --tol 5e-2"
    # Adam divides by the root of its second moment: where a gradient is tiny,
    # float32 rounding moves the step by more than 1e-5 in 30 steps (seen 1.2e-5)
    "exact --freeze --unused --route --validate --clip --uneven --join --opt adamw --tol 1e-4 --parametrize"
    "exact --transposed --penalty --batchnorm --clip --opt adam --tol 1e-4"
    # bit-identical replicas after each of 300 Adam steps (the values drift
    # from one process's by rounding, seen 3.8e-5)
    "exact --steps 300 --route --opt adam --tol 1e-3" "maxnorm --opt adam"
    "maxnorm --sync fms --opt sgd"
    "exact --closure --opt lbfgs --steps 5 --tol 1e-4 --uneven --freeze --route --validate"
    "exact --closure --opt adamw --buckets --transposed --hooks"
    "contrastive --opt sgd --sync fms" "varlen --opt momentum --sync fms"
    "maml --sync fms --opt momentum --steps 60" "losshead --opt momentum --sync fms"
    "nonfinite --opt adam --sync fms"
    # (buckets and freezing are in the CI's batchnorm case too; joins with
    # uneven shards and clipping in its --hooks case)
    "exact --buckets --freeze --opt momentum" "tokens --opt momentum --sync fms"
    "exact --unused --transposed --buckets --opt momentum"
    "exact --buckets --uneven --join --clip")
fi
timeout 300 "$SFB" launch -n 4 -- "$PY" "$JOB" "${cases[@]}" >"$tmp/out" 2>&1; rc=$?
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
grep -E '^\[0\] ok |FAIL' "$tmp/out"
check "exit 0 (rc=$rc)" "[ $rc = 0 ]"
for c in "${cases[@]}"; do
  mode=${c%% *}
  n=$(grep -cF "] ok ${mode}:" "$tmp/out")
  [ "$mode" = exact ] && n=$(grep -cF "] ok exact $c:" "$tmp/out")
  case $mode in seq2seq|maxnorm|contrastive|varlen|rollback|moe|maml|losshead|finetune) n=$(grep -cF "] ok $c:" "$tmp/out");; esac
  check "$c: ok on 4 ranks ($n)" "[ $n = 4 ]"
done
if [ $fails != 0 ]; then tail -n 30 "$tmp/out"; fi
echo "$passes passed, $fails failed"
[ $fails = 0 ]
