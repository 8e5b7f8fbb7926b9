# Helpers the scripts in this folder source (not run on its own).

# --resume where a stopped step left its partial output ($1: a recording's <out>.parts folder, a fit's output), so the
# step continues instead of starting over (record refuses to start afresh over a stopped recording's batches)
resume() {
  if [[ -e $1 ]]; then echo --resume; fi
}
