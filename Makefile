# trdr: one target per paper artefact. Results go to runs/<name>/ unless WORKDIR is set.
PYTHON ?= python
RUNS ?= runs
# Size of the paper artefacts' runs: cpu (default, minutes on 2 cores), paper (one GPU) or smoke.
SIZE ?= cpu
PAPER_VARIANT = $(if $(filter paper,$(SIZE)),,$(SIZE))
PAPER = $(PYTHON) experiments/paper.py --config=configs/report.py:$(PAPER_VARIANT) --workdir=$(RUNS)/report_$(SIZE)

REPORT = $(PYTHON) experiments/report.py --config=configs/report.py:$(PAPER_VARIANT) --workdir=$(RUNS)/report_$(SIZE)

.PHONY: help install test landscape-affine landscape-affine-smoke benchmark benchmark-main-job benchmark-solvers benchmark-decoreco benchmark-decoreco-cpu benchmark-lower-level benchmark-sweep benchmark-pruning benchmark-step benchmark-cold-path benchmark-conv benchmark-dp membership membership-doc knowledge knowledge-doc knowledge-smoke victim-recipe victim-recipe-doc cnn cnn-doc dp dp-doc power power-doc fig1 fig2 fig3 fig4 table1 table1-readings outer-step readings-attack sweep fig5 fig6 fig7 fig8 fig9 fig10 fig11 fig12 figures results-doc gpu-check gpu-doc gpu-wheels

help:  ## List the targets.
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-24s %s\n", $$1, $$2}'

install:  ## Install trdr with the test extra (the README's install command).
	$(PYTHON) -m pip install -e ".[test]"

test:  ## Run the test suite (the README's test command).
	$(PYTHON) -m pytest

landscape-affine:  ## Fig. 10(a), 11(a), 12(a): bilevel energy landscape, affine victim (~CPU minutes, see README).
	$(PYTHON) experiments/landscape.py --config=configs/bilevel_affine.py --workdir=$(RUNS)/bilevel_affine

landscape-affine-smoke:  ## The same path at toy size, in seconds.
	$(PYTHON) experiments/landscape.py --config=configs/bilevel_affine.py:smoke --workdir=$(RUNS)/bilevel_affine_smoke --overwrite

benchmark:  ## The default sections side by side (~25 min on 2 cores) -> docs/performance.md, with the machine, versions and date.
	$(PYTHON) experiments/benchmark.py --output=docs/performance.md

# One section each; their records go to $(RUNS)/benchmarks/, docs/performance.md is make benchmark's.
benchmark-solvers:  ## Only the three hypergradient solves, affine and one-hidden (:cpu) victims.
	$(PYTHON) experiments/benchmark.py --sections=solvers --output=$(RUNS)/benchmarks/solvers.md

benchmark-decoreco:  ## One DecoReco iteration at paper size, autodiff vs fused kkt_mlp, f64 and f32 (minutes).
	$(PYTHON) experiments/benchmark.py --sections=decoreco --output=$(RUNS)/benchmarks/decoreco.md

benchmark-decoreco-cpu:  ## The same at the :cpu runs' size, m = 200 candidates.
	$(PYTHON) experiments/benchmark.py --sections=decoreco --decoreco_candidates=200 --output=$(RUNS)/benchmarks/decoreco_cpu.md

benchmark-main-job:  ## The main job whole, lower level L-BFGS (before) vs Newton-CG (now), phase by phase.
	$(PYTHON) experiments/benchmark.py --sections=main_job --output=$(RUNS)/benchmarks/main_job.md

benchmark-lower-level:  ## The grid with the Newton-CG lower level vs L-BFGS (default config).
	$(PYTHON) experiments/benchmark.py --sections=lower_level --output=$(RUNS)/benchmarks/lower_level.md

benchmark-sweep:  ## DecoReco sweep: S settings vmapped as one computation vs a loop (:cpu size).
	$(PYTHON) experiments/benchmark.py --sections=sweep --output=$(RUNS)/benchmarks/sweep.md

benchmark-pruning:  ## Whether a Cauchy–Schwarz-pruned exact SSIM search could beat the all-pairs one (after make landscape-affine: its reconstructions too) -> docs/ssim_pruning.md.
	$(PYTHON) experiments/benchmark.py --sections=pruning --pruning_results=$(RUNS)/bilevel_affine/results.npz --output=docs/ssim_pruning.md

benchmark-step:  ## Where one outer step of the bilevel attack spends its time: lower level, hypergradient, update -> docs/step_profile.md.
	$(PYTHON) experiments/benchmark.py --sections=step --output=docs/step_profile.md

benchmark-cold-path:  ## The main job with an empty compilation cache and warm, this tree vs BASELINE (default HEAD~1), phase by phase -> docs/cold_path.md.
	$(PYTHON) experiments/benchmark.py --sections=cold_path --cold_path_baseline=$(or $(BASELINE),HEAD~1) --output=docs/cold_path.md

benchmark-conv:  ## The CNN's DecoReco step beside the MLP's (ms / step, ratio, profile); the 3x3 convs, Conv3x3 vs nn.Conv, top level and in lax.scan (:cpu size).
	$(PYTHON) experiments/benchmark.py --sections=conv --output=$(RUNS)/benchmarks/conv.md

benchmark-dp:  ## DP-SGD's clipped sum for configs/dp.py:cpu's victims, one example at a time (trdr's) vs all n vmapped.
	$(PYTHON) experiments/benchmark.py --sections=dp --output=$(RUNS)/benchmarks/dp.md

fig1:  ## Fig. 1: random initialisation, affine (a) and one-hidden (b); SIZE=cpu|paper|smoke.
	$(PAPER) --artefacts=fig1

fig2:  ## Fig. 2: ground-truth initialisation, affine (a) and one-hidden (b).
	$(PAPER) --artefacts=fig2

fig3:  ## Fig. 3: affine, partition initialisation vs training set (a) and partition (b).
	$(PAPER) --artefacts=fig3

fig4:  ## Fig. 4: one-hidden, partition initialisation vs training set (a) and partition (b).
	$(PAPER) --artefacts=fig4

table1:  ## Table 1: ||θ* − θ||² for {affine, one-hidden} x {random, ground truth, partition}.
	$(PAPER) --artefacts=table1

table1-readings:  ## Table 1's distance at its starts under each reading of the paper's random θ0 (one-hidden, ReLU and softplus, 3 seeds).
	$(PAPER) --artefacts=table1_readings

outer-step:  ## Eq. 7's plain gradient step beside Adam on the affine victim of Figs. 1–3 (η chosen by the noise start's final l), and both with the outer stopping rule.
	$(PAPER) --artefacts=outer_step

readings-attack:  ## Figs. 1, 2, 4 and Table 1 on the one-hidden victim under readings (a), (b), (e) of the paper's random θ0, and the headline reading.
	$(PAPER) --artefacts=table1_readings,readings_attack

sweep:  ## DecoReco vmapped hyperparameter sweep (σ, lr, λ_min, α); its best.json feeds Figs. 6–12.
	$(PYTHON) experiments/sweep.py --config=configs/decoreco_cifar.py:$(PAPER_VARIANT) --workdir=$(RUNS)/report_$(SIZE)/decoreco_figures/sweep --config.victim.checkpoint_dir=$(RUNS)/report_$(SIZE)/decoreco_figures/victim

fig5:  ## Fig. 5: DecoReco from N(0,1) (σ untuned, the tuned run's other settings); SIZE=cpu|paper|smoke.
	$(PAPER) --artefacts=fig5

fig6:  ## Fig. 6: DecoReco, tuned σ (runs the sweep first), reconstructions ranked by SSIM.
	$(PAPER) --artefacts=fig6

fig7:  ## Fig. 7: tuned σ, each training image beside its best reconstruction; SSIM vs Φ(x_i).
	$(PAPER) --artefacts=fig7

fig8:  ## Fig. 8: overview of the first reconstructions beside their nearest neighbours.
	$(PAPER) --artefacts=fig8

fig9:  ## Fig. 9: DecoReco from the partition, vs training set (a) and partition (b).
	$(PAPER) --artefacts=fig9

fig10:  ## Fig. 10: landscape heatmaps, bilevel (a) and DecoReco (b).
	$(PAPER) --artefacts=fig10

fig11:  ## Fig. 11: λ2 = 1 line of both landscapes.
	$(PAPER) --artefacts=fig11

fig12:  ## Fig. 12: λ1 = 1 line of both landscapes.
	$(PAPER) --artefacts=fig12

# make figures reads runs/report_SIZE/membership/membership.json when make membership has written it.
membership:  ## Membership ambiguity as an adversary faces it, three attacks, five victims each, eight LiRA shadows per victim (~65 min at SIZE=cpu): runs/report_SIZE/membership/membership.md.
	$(PYTHON) experiments/membership.py --config=configs/membership.py:$(PAPER_VARIANT) --workdir=$(RUNS)/report_$(SIZE)/membership

membership-doc:  ## docs/membership_results.md and docs/membership.png from runs/report_SIZE/membership, after make membership.
	cp $(RUNS)/report_$(SIZE)/membership/membership.md docs/membership_results.md
	cp $(RUNS)/report_$(SIZE)/membership/membership.png docs/membership.png

knowledge:  ## Privacy against what the adversary knows (informed adversary, k unknown images; ~40 min at SIZE=cpu): runs/knowledge_SIZE/knowledge.md.
	$(PYTHON) experiments/knowledge.py --config=configs/knowledge.py:$(SIZE) --workdir=$(RUNS)/knowledge_$(SIZE)

knowledge-doc:  ## docs/knowledge.{md,png} from runs/knowledge_SIZE, after make knowledge.
	cp $(RUNS)/knowledge_$(SIZE)/knowledge.md $(RUNS)/knowledge_$(SIZE)/knowledge.png docs/

victim-recipe:  ## DecoReco's victim recipe ablated: later-layer init x training time x 3 seeds, KKT premise and counts (~1.5 h at SIZE=cpu): runs/victim_recipe_SIZE/victim_recipe.md.
	$(PYTHON) experiments/victim_recipe.py --config=configs/victim_recipe.py:$(SIZE) --workdir=$(RUNS)/victim_recipe_$(SIZE)

victim-recipe-doc:  ## docs/victim_recipe.md from runs/victim_recipe_SIZE, after make victim-recipe.
	cp $(RUNS)/victim_recipe_$(SIZE)/victim_recipe.md docs/

cnn:  ## DecoReco on CNNs beside Haim et al.'s MLP: the 7,104-parameter CNN at n = 100 (p << d·n, 2 seeds) and a (64, 64) CNN at n = 4 (p > d·n, b9dfyspx and sweep-tuned, 3 seeds) (~30 min at SIZE=cpu with the n = 100 runs reused, the truth diagnostic included; over an hour without them): runs/cnn_SIZE/cnn.md.
	$(PYTHON) experiments/cnn.py --config=configs/cnn.py:$(SIZE) --workdir=$(RUNS)/cnn_$(SIZE)

cnn-doc:  ## docs/cnn.{md,png} from runs/cnn_SIZE, after make cnn.
	cp $(RUNS)/cnn_$(SIZE)/cnn.md $(RUNS)/cnn_$(SIZE)/cnn.png docs/

dp:  ## Attacks on DP-SGD victims (ε ≈ 1 to 100, σ = 0, non-private) beside the ReRo bound, incl. the prior-aware attack (K = 2, 10), 3 seeds (~21 min at SIZE=cpu on 2 cores, compilation cache empty): runs/dp_SIZE/dp.md.
	$(PYTHON) experiments/dp.py --config=configs/dp.py:$(SIZE) --workdir=$(RUNS)/dp_$(SIZE)

dp-doc:  ## docs/dp.{md,png} from runs/dp_SIZE, after make dp.
	cp $(RUNS)/dp_$(SIZE)/dp.md $(RUNS)/dp_$(SIZE)/dp.png docs/

power:  ## DecoReco's power against n: Haim et al.'s MLP at n = 10-100, published and sweep-tuned settings, 3 seeds (~50 min at SIZE=cpu on 2 quiet cores, an estimate): runs/power_SIZE/power.md.
	$(PYTHON) experiments/power.py --config=configs/power.py:$(SIZE) --workdir=$(RUNS)/power_$(SIZE)

power-doc:  ## docs/power.{md,png} and the calibration table trdr/assets/power.json from runs/power_SIZE, after make power.
	cp $(RUNS)/power_$(SIZE)/power.md $(RUNS)/power_$(SIZE)/power.png docs/
	cp $(RUNS)/power_$(SIZE)/power.json trdr/assets/power.json

knowledge-smoke:  ## The same at smoke size (a couple of minutes; CI runs it in the tests).
	$(MAKE) knowledge SIZE=smoke

figures:  ## Figs. 1–12 + Table 1 with verdicts (and membership's, after make membership): runs/report_SIZE/report.md.
	$(REPORT)

# gpu-check: SIZE=smoke runs on the CPU (CI); any other SIZE means the paper's sizes.
GPU_SIZE = $(if $(filter smoke,$(SIZE)),smoke,paper)
PARTS ?= decoreco,one_hidden,notebook
LIMIT ?= 540
gpu-check:  ## The paper's sizes on one GPU within LIMIT s (DecoReco at Haim et al.'s size, the one-hidden victim, the notebook): runs/gpu_check_SIZE/results/<time>/.
	$(PYTHON) experiments/gpu_check.py --size=$(GPU_SIZE) --parts=$(PARTS) --limit=$(LIMIT) --workdir=$(RUNS)/gpu_check_$(GPU_SIZE)

GPU_PLATFORMS = $(foreach n,2_17 2_24 2_27 2_28 2_31 2_34,--platform manylinux_$(n)_x86_64) --platform manylinux2014_x86_64
gpu-wheels:  ## The packages gpu-check needs that the GPU image lacks (experiments/gpu_wheels.txt), as wheels in .whl/ for the device's carry.
	$(PYTHON) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $(GPU_PLATFORMS) -d .whl -r experiments/gpu_wheels.txt

gpu-doc:  ## docs/gpu.md from the gpu-check results kept in docs/gpu/ (one folder per call).
	$(PYTHON) experiments/gpu_doc.py --results=docs/gpu --output=docs/gpu.md

results-doc:  ## docs/verdicts.md (the README's results) from runs/report_SIZE/report.json, after make figures.
	$(PYTHON) experiments/results_doc.py --report=$(RUNS)/report_$(SIZE)/report.json --output=docs/verdicts.md
