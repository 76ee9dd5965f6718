# The job's own sitecustomize: vramdoc's injected one must still run it.
import os

os.environ["CHAINED_SITECUSTOMIZE"] = "yes"
