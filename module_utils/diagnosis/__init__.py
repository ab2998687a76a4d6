# -*- coding: utf-8 -*-
"""What gpuhost tells people: the error catalogue and `explain`, drift against the record, the reports."""
