"""What every service process runs on: the service runner (its bus, store and loops, :mod:`.service`), the
event relay from the database's journal to the bus (:mod:`.relay`) and the refusals of a broker or a database
open to anyone (:mod:`.exposure`). Its vitals, metrics and logs are :mod:`shared.ops`."""
