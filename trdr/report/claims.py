"""The paper's claims that the report tests, quoted, and the thresholds of the rules.

`CLAIMS`: per artefact, the paper's sentence (Runkel et al. 2024, arXiv 2412.08544; the
text in ../shared/paper/runkel2024_text.txt, captions in runkel2024_with_equations.txt),
where it stands, and the rule of `trdr.report.verdicts` that tests it, in words. Square brackets
in a quotation stand for symbols or words the quotation leaves implicit. `RULES`: the
rules' thresholds, which the rule texts name in braces. How a rule's checks make a verdict
is `trdr.report.verdicts`.
"""

from trdr.evaluation import realism

# Thresholds of the verdict rules. SSIM is dm-pix's (11 × 11 window); L2 is the Euclidean
# distance over all pixel values in [0, 1] (3072 for CIFAR-10).
RULES = {
    "no_reconstruction_max_ssim": 0.3,  # mean SSIM to the nearest training image below
    "recovered_min_ssim": 0.9,          # "recovers the training data": mean SSIM above
    "recovered_max_l2": 1.0,            # and mean L2 below
    "small_param_distance": 1e-2,       # "small" ||θ*−θ||²: the paper's largest is 6.4e-3
    "ssim_level": 0.4,                  # a training image counts as reconstructed
    "fig5_max_untuned": 3,              # "at most the first three reconstructions"
    "fig6_top": realism.QUIZ_TOP,       # "four … among the top 10"
    # Figs. 6, 7 and 8 scale the ranks 10 and 50 from the published runs' 1,000 candidates
    # to a run's m (`realism.scaled_ranks`); Fig. 7's quiz is asked this many times.
    "paper_candidates": realism.PAPER_CANDIDATES,
    "quiz_draws": 1000,
    "majority": 0.5,                    # "the majority of the resulting images"
    "partition_side_max_lambda": 0.5,   # Fig. 11: "for λ < 0.5"
    # "Cannot tell" (an AUC at chance) needs its 95 % interval inside 0.5 ± this margin;
    # an interval that contains 0.5 but is wider is "underpowered" (fixed before running).
    "equivalence_margin": 0.1,
    # Membership (Carlini et al. 2022's convention), per score (`verdicts.membership_answer`):
    # "can tell" when its AUC's or its TPR's (at this FPR) p-value against a random score is
    # below 1 − confidence, Bonferroni-divided over the tests of its group; "cannot tell"
    # only when the AUC's CI over victims is inside 0.5 ± the equivalence margin and, with at least
    # 10 / FPR non-members (fewer: the FPR cannot be resolved), the TPR's interval lies at or
    # below membership_max_tpr; else underpowered.
    "membership_fpr": 0.01,
    "membership_max_tpr": 0.05,
    "membership_confidence": 0.95,
}

# artefact -> (the paper's sentence, quoted; where it stands; the rule in words).
CLAIMS = {
    "fig1": ("“For a random initialisation of [x], both the affine and one-hidden layer "
             "classifier cannot reconstruct any training images … The resulting images look "
             "like random noise. … this distance [||θ*−θ||²] is small … the optimisation "
             "problem converged even though the visual results [for x] do not resemble any "
             "training data.”",
             "Sec. 4.3 (a), Fig. 1, Table 1",
             "noise start (λ1 = λ2 = 0), each victim: mean SSIM to the nearest training image "
             "< {no_reconstruction_max_ssim}; mean SSIM to the nearest noise image > to the "
             "nearest training image; ||θ*−θ||² < {small_param_distance}"),
    "fig2": ("“when initialising with ground truth training images, the affine classifier "
             "recovers the training data perfectly. For the same initialisation, even the "
             "one-hidden layer classifier recovers images resembling the training data … In "
             "both cases, the distance between [θ*] and [θ] remains small.”",
             "Sec. 4.3 (b), Fig. 2",
             "ground-truth start, each victim: mean SSIM to the nearest training image > "
             "{recovered_min_ssim} and mean L2 to it < {recovered_max_l2}; ||θ*−θ||² < "
             "{small_param_distance}"),
    "fig3": ("“it is clear that the approach is not reconstructing the true training data but "
             "rather the same images that were used for the intialisation … the distance "
             "between [θ*] and [θ] remains small”",
             "Sec. 4.3 (c), Fig. 3 (affine classifier)",
             "partition start: a majority (> {majority}) of the reconstructions have their own "
             "start image as SSIM-nearest image of training set ∪ partition; ||θ*−θ||² < "
             "{small_param_distance}"),
    "fig4": ("“it is clear that the approach is not reconstructing the true training data but "
             "rather the same images that were used for the intialisation … the distance "
             "between [θ*] and [θ] remains small”",
             "Sec. 4.3 (c), Fig. 4 (one-hidden layer classifier)",
             "as Fig. 3, for the one-hidden victim"),
    "table1": ("“For a random initialisation of [θ], as highlighted in table 1 this distance is "
               "small for both the affine and one-hidden layer classifier.”",
               "Sec. 4.3 (a), Table 1",
               "all six ||θ*−θ||² (random, ground-truth and partition start; both victims) < "
               "{small_param_distance}"),
    "fig5": ("“Initialising the DecoReco approach randomly with [x ~ N(0, 1)], i.e., without "
             "finetuning the variance of the distribution, fig. 5 shows that at most the first "
             "three reconstructions resemble natural images while still being very noisy.”",
             "Sec. 4.4, Fig. 5",
             "from N(0, 1) (σ = 1, Fig. 6's other settings): reconstructions resembling "
             "natural images (SSIM ≥ {ssim_level} to the nearest training or public image) "
             "≤ {fig5_max_untuned}; training images reconstructed (best SSIM ≥ {ssim_level}) "
             "≤ {fig5_max_untuned}, and fewer than with the tuned σ (the paper's next "
             "sentence: “In the following, we use the very specific scale factor”)"),
    "fig6": ("“Four of these reconstructions are among the top 10 nearest neighbours to "
             "actual training images while one is not even in the top 50. Can you guess "
             "which one?”",
             "Fig. 6 caption; Sec. 4.4",
             "rank the tuned run's reconstructions by SSIM to their nearest training image, "
             "each training image once (its best reconstruction), and scale the paper's "
             "ranks 10 and 50 from its {paper_candidates} candidates to the run's m (at "
             "least {fig6_top}); the quiz shows the {fig6_top} best and, fourth, the most "
             "realistic-looking one (realism: SSIM to its nearest public test-split image, "
             "no training set needed) ranked below the scaled 50. Check: the {fig6_top} "
             "are distinct training images in the scaled top 10, each SSIM ≥ {ssim_level} "
             "(reconstructed). Not tested when no reconstruction ranks below the scaled 50"),
    "fig7": ("“Solution: Clearly, the 4th reconstruction (top row) is not within the top 50 "
             "nearest neighbours to actual training images (bottom row).” — “Only when "
             "looking at the reconstructions in combination with the training images, one is "
             "able to distinguish the four high ranked images from the low-ranked”",
             "Fig. 7 caption; Sec. 4.4",
             "Fig. 6's quiz asked {quiz_draws} times (four drawn from the scaled top 10, one "
             "from below the scaled 50) of an adversary without the training set, who names "
             "the least realistic-looking of the five (lowest SSIM to the public test split) "
             "as the low-ranked one: its success rate's 95% bootstrap interval (over the two "
             "pools) lies inside the chance rate 1/5 ± {equivalence_margin}; an interval that "
             "contains 1/5 but is wider is underpowered. Measured beside, named as theirs: "
             "Haim et al.'s finding (their Fig. 4) that well-reconstructed images have small "
             "|Φ(x_i)|"),
    "fig8": ("“Lower ranked images without any resemblance to their nearest neighbour in "
             "some cases do resemble valid training set candidates.” — “without having access "
             "to the training data, an adversary cannot identify whether a reconstructed "
             "natural image is part of the training dataset”",
             "Fig. 8 caption; Sec. 4.4",
             "with the paper's ranks 10 and 50 scaled from its {paper_candidates} candidates "
             "to the run's m as in Fig. 6: the tuned run's reconstructions in the scaled top "
             "10 (by SSIM to the nearest training image) each have SSIM ≥ {ssim_level}, and "
             "a realism score without the training set (SSIM to the nearest public "
             "test-split image) does not tell them from the reconstructions ranked below the "
             "scaled 50: its AUC's 95% bootstrap interval lies inside 0.5 ± "
             "{equivalence_margin}; an interval that contains 0.5 but is wider is "
             "underpowered (the experiment could not tell). Not tested with no "
             "reconstruction below the scaled 50"),
    "fig9": ("“the majority of the resulting images reflects the initialisation rather than "
             "the real training samples. Interestingly, a single training image can be "
             "reconstructed”",
             "Sec. 4.4, Fig. 9",
             "partition start: a majority (> {majority}) of the reconstructions have their own "
             "start image as SSIM-nearest image of training set ∪ partition, as a test: the "
             "fraction's one-sided 95% bound (binomial standard error) above {majority}, "
             "underpowered when the two bounds straddle it; at least one training image "
             "recovered: a best-buddy pair (Haim et al.'s matching) with SSIM ≥ {ssim_level} "
             "(the count is reported beside the caption's one)"),
    "fig10": ("“While the bilevel formulation on average performs better in recovering ground "
              "truth images if [x_init] is close enough to the ground truth (see fig. 10(a)), "
              "the average [L2] distance increases quicker for a higher proportion of "
              "[x_rnd] than in the DecoReco formulation (see fig. 10(b)).”",
              "Sec. 4.5, Fig. 10",
              "both attacks on one scale (min-max scaled images, Haim et al.'s view; trdr "
              "scores bilevel images raw elsewhere), on the change Δ = mean L2 to the nearest "
              "training image of the reconstructions − of their starts: at the ground-truth "
              "start (λ1 = λ2 = 1) bilevel's reconstructions recover the training images "
              "(mean SSIM to the nearest ≥ {ssim_level}: an attack that performs better in "
              "recovering must recover) and its Δ is smaller than DecoReco's; along λ1 = 1, "
              "the rise "
              "of L2 to train from the ground-truth start to the noise start (λ2 = 0) beyond "
              "the starts' own rise larger for bilevel"),
    "fig11": ("“For [λ < 0.5], the average [L2] distance between the reconstructions and "
              "images of the distinct CIFAR partition (green) is smaller than the distance to "
              "the ground truth training images for both approaches. … In case of the bilevel "
              "formulation, the average [L2] distance becomes much smaller than for the "
              "DecoReco approach.”",
              "Sec. 4.5, Fig. 11 (a), (b): λ2 = 1, λ1 = λ",
              "both attacks on one scale (min-max), every grid point with λ2 = 1 and λ1 < "
              "{partition_side_max_lambda}: mean L2 to the nearest partition image < to the "
              "nearest training image (the crossover λ1 of the two curves is reported, of the "
              "reconstructions and of the starts); there bilevel's change Δ of the L2 to the "
              "partition from its starts smaller than DecoReco's (“much” is not quantified: "
              "both values are reported)"),
    "fig12": ("“Increasing [λ] increases the influence of ground truth training images on the "
              "initialisation, which for both formulations of the optimisation problem, "
              "results in reconstructions converging towards ground truth training images. In "
              "case of the bilevel formulation, the average [L2] distance becomes much smaller "
              "than for the DecoReco approach.”",
              "Sec. 4.5, Fig. 12 (the paper's text says Fig. 11 (c), (d)): λ1 = 1, λ2 = λ",
              "both attacks on one scale (min-max), along λ1 = 1: “converging towards” as "
              "movement, the reconstructions nearer the training set than their starts (Δ L2 "
              "to train < 0) at every λ2 < 1; bilevel's mean Δ along the line smaller than "
              "DecoReco's (Spearman ρ(λ2, L2) is reported, not tested: the starts have ρ = −1 "
              "by construction)"),
    "membership": ("“even when reconstructing natural images that could be part of the "
                   "training dataset, an adversary yet cannot identify whether it is a valid "
                   "or invalid training data sample with certainty”",
                   "Sec. 5 (conclusion)",
                   "per attack and start kind (`trdr.report.membership`, configs/membership.py), "
                   "among natural-looking reconstructions, each per-image score the adversary "
                   "can compute: it can tell when its AUC (Mann–Whitney) or its TPR at "
                   "{membership_fpr:.0%} FPR (Fisher's exact test against the non-members "
                   "above the threshold) differs from a random score's at p < "
                   "1 − {membership_confidence}, Bonferroni-divided over the group's tests; "
                   "it cannot tell only when the AUC's 95 % interval over victims (Student "
                   "t of the victims' own AUCs) lies inside 0.5 ± "
                   "{equivalence_margin} and, with at least 10 / FPR non-members, the TPR's "
                   "interval lies at or below {membership_max_tpr:.0%}; otherwise the score "
                   "is underpowered. Controls on the mixed starts: positive (training vs "
                   "partition starts after the same attack; an attack whose positive control "
                   "detects nothing cannot support cannot tell, its passes count as "
                   "underpowered) and negative (random halves of non-members; a score that "
                   "tells them apart is a false alarm, reported). "
                   "A check per attack and start kind: no score tells "
                   "and every score cannot tell (scores with fewer than min_per_class members "
                   "or non-members are left out). A failed check: partly or not reproduced; "
                   "no failed check but an underpowered score: underpowered; all pass: "
                   "reproduced; no informative score: uninformative. Baseline: the same rule "
                   "on the start images"),
}

def claim(name: str, rules: dict = RULES) -> tuple[str, str, str]:
  """(quotation, source, rule in words with ``rules``' thresholds) of artefact ``name``."""
  quote, source, rule = CLAIMS[name]
  return quote, source, rule.format(**rules)
