"""ddnumba: differential dataflow for Python, on a Numba-compiled columnar array engine.

Build a program once from :class:`Collection` methods; feed it change batches through
input handles; ``run()`` keeps every output up to date by processing only differences,
each update at its own (possibly partially ordered) time, all times of a batch in one
pass.

>>> import ddnumba as dd
>>> df = dd.Dataflow()
>>> edges_in, edges = df.new_input(["src", "dst"])
>>> degree = edges.count().capture()
>>> edges_in.insert([1, 1, 2], [2, 3, 3], time=0)
>>> edges_in.advance_to(1); df.run()
>>> degree.at(0).to_pylist()
[{'src': 1, 'count': 2, 'count_': 1}, {'src': 2, 'count': 1, 'count_': 1}]
"""
from ddnumba.collection import Arranged, Collection
from ddnumba.dataflow import Dataflow, InputHandle
from ddnumba.operators.output import Captured, Probe

__version__ = "0.1.0"

__all__ = ["Dataflow", "InputHandle", "Collection", "Arranged", "Captured", "Probe",
           "__version__"]
