"""The studies that are experiments of their own, beside the paper's figures.

  membership     membership ambiguity measured as an adversary faces it: per-image
                 scores, offline LiRA's shadow victims, leave-one-out, over several victims
  knowledge      privacy against what the adversary knows (the informed adversary, k
                 unknown training images)
  readings       which θ0 the paper's lower level starts from: Table 1's distance under
                 each reading
  victim_recipe  DecoReco's victim recipe ablated: the KKT premise of θ* and the counts
  cnn            DecoReco on a convolutional victim beside Haim et al.'s MLP, at the
                 same size and settings: the counts, the KKT premise, the test accuracy
  dp             privacy due to noise: the attacks on DP-SGD victims (ε ≈ 1 to 100, σ = 0,
                 non-private) beside the reconstruction-robustness bound DP guarantees
  power          DecoReco's power against the training-set size n (published and sweep-
                 tuned settings): the calibration table of `trdr.evaluation.power`

Each runs its own `trdr.experiment` runs (reused while finished with the same config) and
writes its own JSON and Markdown; `trdr.report` judges what they measured by the rules of
`trdr.report.verdicts`.
"""
